"""One name and one set of values per waldio option, everywhere it can be set.

An option `x_y` is the URI parameter `waldio_x_y`, the environment variable
`WALDIO_X_Y`, `PRAGMA waldio_x_y` where it has one, the flag `--x-y` and the
keyword `waldio.connect(x_y=...)`. Every name and value list is read from the
code that accepts it, never from a copy kept here:

* src/options.c: the URI parameters, the parser of each and its value words;
* src/preload.c: the environment variables (`waldio run`, `waldio env`);
* src/pragmas.c and src/pragma_vtab.c: the PRAGMAs;
* python/waldio: `waldio.OPTION_NAMES`, `run.ENV_OPTIONS` and every argparse
  parser of the `waldio` command (and of `python3 -m waldio.bench.compare_mobibench`).

A flag spelled like an option (`--sync`, `--layout`...) must mean that option
wherever it appears. Every `--help` ends with an example, and that example
parses.
"""
from __future__ import annotations

import argparse
import re
import shlex
from pathlib import Path
from typing import Any, Dict, Iterator, List, Set, Tuple

import pytest

import waldio
from waldio import cli, run
from waldio.bench import compare_mobibench

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"


def c_source(name: str) -> str:
    return (SRC / name).read_text()


def words(expected: str) -> List[str]:
    """'auto, embed, pad4k or pad8k' -> ['auto', 'embed', 'pad4k', 'pad8k']."""
    return re.split(r", | or | and ", expected.strip())


def parser_values() -> Dict[str, List[str]]:
    """waldio_parse_X -> the words it accepts: an az... table or strcasecmp literals."""
    text = c_source("options.c")
    tables = {name: re.findall(r'"([^"]+)"', body) for name, body in
              re.findall(r"static const char \*(az\w+)\[\] = \{([^}]*)\}", text)}
    values = {}
    for name, body in re.findall(r"int waldio_parse_(\w+)\(const char \*z, int \*pOut\)\{(.*?)\n\}",
                                 text, re.S):
        table = re.search(r"\b(az\w+)\[i\]", body)
        values[name] = tables[table.group(1)] if table else re.findall(r'strcasecmp\(z, "(\w+)"\)', body)
    return values


def uri_options() -> Dict[str, Tuple[str, str]]:
    """option -> (parser, expected text) from waldio_options_from_uri."""
    text = c_source("options.c")
    found = {}
    for key, parser, key2, expected in re.findall(
            r'sqlite3_uri_parameter\(zUri, "waldio_(\w+)"\)\)!=0\s*&& \(?waldio_parse_(\w+)\('
            r'.*?bad_uri\("waldio_(\w+)", z, "([^"]*)"\)', text, re.S):
        assert key == key2, f"the URI parameter waldio_{key} reports itself as waldio_{key2}"
        found[key] = (parser, expected)
    assert found, "no URI parameters found in src/options.c"
    return found


def env_options() -> Dict[str, Tuple[str, str]]:
    """option -> (parser, expected text) from preload.c's parse_env table."""
    rows = re.findall(r'\{ "WALDIO_(\w+)", (\w+), [^,]+, (\w+), [^,]+,\s*"([^"]*)" \}',
                      c_source("preload.c"))
    assert rows, "no environment variables found in src/preload.c"
    return {name.lower(): ((p_int if p_int != "0" else p_bytes).replace("waldio_parse_", ""), expected)
            for name, p_int, p_bytes, expected in rows}


def pragmas() -> Set[str]:
    return {"waldio"} | set(re.findall(r'strcasecmp\(zName, "(waldio_\w+)"\)', c_source("pragmas.c")))


ENUMS = parser_values()
URI = uri_options()


def enum_options() -> Dict[str, List[str]]:
    """option -> the values libwaldio accepts, for the options with a fixed set."""
    return {key: ENUMS[parser] for key, (parser, _) in URI.items() if parser in ENUMS and ENUMS[parser]}


# --------------------------------------------------------------- libwaldio itself

def test_one_set_of_options_in_uri_environment_and_python() -> None:
    env = env_options()
    assert set(env) == set(URI), "WALDIO_* variables (src/preload.c) and waldio_* URI parameters differ"
    assert set(waldio.OPTION_NAMES) == set(URI)
    assert waldio.OPTION_NAMES == {k: "waldio_" + k for k in URI}
    assert run.ENV_OPTIONS == {k: "WALDIO_" + k.upper() for k in URI}
    for key, (parser, _) in env.items():
        assert parser == URI[key][0], f"WALDIO_{key.upper()} and waldio_{key} are parsed differently"


def test_every_message_lists_the_values_its_parser_accepts() -> None:
    enums = enum_options()
    assert {"layout", "sync", "io", "group"} <= set(enums)
    env = env_options()
    for key, values in enums.items():
        assert words(URI[key][1]) == values, f"bad_uri message of waldio_{key}"
        assert words(env[key][1]) == values, f"preload.c message of WALDIO_{key.upper()}"
    text = c_source("pragmas.c")
    sync = re.search(r'"waldio_sync=%s: expected"\s*" ([^"(]*?) \(', text).group(1)
    assert words(sync) == enums["sync"]
    group = re.search(r'zWhich\[0\]==0 \? "([^"]*)"', text).group(1)
    assert words(group) == enums["group"]


def test_pragmas_are_options_and_every_list_of_them_agrees() -> None:
    names = pragmas()
    for name in names - {"waldio", "waldio_stats"}:
        assert name[len("waldio_"):] in URI, f"PRAGMA {name} sets no option of that name"
    vtab = re.search(r"azPragma\[\] = \{([^}]*)\}", c_source("pragma_vtab.c")).group(1)
    assert set(re.findall(r'"(\w+)"', vtab)) == names, "pragma_vtab.c's table functions"
    listed = re.search(r'pragmas are (.*?)", zName\)', c_source("pragmas.c"), re.S).group(1)
    assert set(words(re.sub(r'"\s*"', "", listed))) == names, "the 'unknown pragma' message"


def test_the_library_accepts_exactly_those_values(apsw_sqlite: Any, dbdir: Path) -> None:
    """What the sources say, checked against the loaded library: every value
    opens a database, another one is refused naming the parameter."""
    probe = apsw_sqlite.stock(dbdir / "probe.db")
    for key, values in enum_options().items():
        for value in values:
            conn = apsw_sqlite.waldio(dbdir / f"{key}-{value}.db", **{key: value})
            conn.execute("PRAGMA journal_mode=WAL")
            assert conn.execute("PRAGMA waldio")[0][0].startswith("{")
            conn.close()
        with pytest.raises(Exception):
            apsw_sqlite.waldio(dbdir / f"{key}-bad.db", **{key: "nonsense"}).execute("PRAGMA waldio")
        message = probe.execute("SELECT waldio_last_error()")[0][0]
        assert f"waldio_{key}=nonsense" in message, message
    probe.close()


def test_docs_name_every_option_and_pragma() -> None:
    usage = (ROOT / "docs" / "usage.md").read_text()
    for key in URI:
        assert f"`waldio_{key}`" in usage, f"docs/usage.md's options table lacks waldio_{key}"
        assert f"`WALDIO_{key.upper()}`" in usage, f"docs/usage.md does not name WALDIO_{key.upper()}"
    for name in pragmas():
        assert f"PRAGMA {name}" in usage, f"docs/usage.md's SQL table lacks PRAGMA {name}"


# --------------------------------------------------------------- the command line

def all_parsers() -> Iterator[Tuple[str, argparse.ArgumentParser]]:
    """('waldio', top), ('waldio bench', ...), ... and compare_mobibench's."""
    top = cli.build_parser()
    todo = [("waldio", top)]
    while todo:
        name, p = todo.pop(0)
        yield name, p
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                todo += [(f"{name} {sub}", sp) for sub, sp in a.choices.items()]
    yield "compare_mobibench", compare_mobibench.parser()


def option_flags() -> Dict[str, str]:
    return {"--" + key.replace("_", "-"): key for key in URI}


def accepts(action: argparse.Action, value: str) -> bool:
    if action.choices is not None:
        return value in action.choices
    try:
        (action.type or str)(value)
    except (argparse.ArgumentTypeError, ValueError, TypeError):
        return False
    return True


@pytest.mark.parametrize("command", ["waldio run", "waldio env"])
def test_run_and_env_take_every_option_as_its_flag(command: str) -> None:
    p = dict(all_parsers())[command]
    by_flag = {s: a for a in p._actions for s in a.option_strings}
    enums = enum_options()
    for flag, key in option_flags().items():
        assert flag in by_flag, f"{command} has no {flag}"
        a = by_flag[flag]
        assert a.dest == key and f"[WALDIO_{key.upper()}]" in a.help
        for value in enums.get(key, []):
            assert accepts(a, value), f"{command} {flag} refuses {value!r}, which libwaldio takes"
        if key in enums:
            assert not accepts(a, "nonsense")


def test_a_flag_named_like_an_option_means_that_option_everywhere() -> None:
    """`--sync` is waldio_sync, `--layout` waldio_layout ... in every command:
    each value such a flag accepts from libwaldio's list is one libwaldio takes,
    and it accepts at least one of them (a flag of the same name with another
    meaning, such as a list of PRAGMA synchronous levels, accepts none)."""
    enums = enum_options()
    flags = option_flags()
    seen = set()
    for command, p in all_parsers():
        for a in p._actions:
            for flag in a.option_strings:
                key = flags.get(flag)
                if key is None:
                    continue
                seen.add(command)
                assert a.dest == key, f"{command} {flag} sets {a.dest}"
                if key in enums:
                    if a.choices is not None:
                        assert set(a.choices) <= set(enums[key]), f"{command} {flag}"
                    assert any(accepts(a, v) for v in enums[key]), \
                        f"{command} {flag} accepts none of waldio_{key}'s values"
    assert {"waldio run", "waldio env", "waldio bench"} <= seen


@pytest.mark.parametrize("command", [name for name, _ in all_parsers() if name.startswith("waldio")])
def test_every_help_ends_with_an_example_that_parses(command: str, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    p = dict(all_parsers())[command]
    lines = p.format_help().splitlines()
    heads = [i for i, line in enumerate(lines) if re.fullmatch(r"examples?:", line)]
    assert heads, f"{command} --help shows no example"
    example = lines[heads[-1] + 1]
    m = re.search(r"(waldio [^)\"#\\]*)", example)
    assert m, f"{command}: first example line {example!r} runs no waldio command"
    argv = shlex.split(m.group(1))[1:]
    assert ("waldio " + " ".join(argv)).startswith(command), (command, example)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "app.db").write_bytes(b"")           # the examples' database argument
    args = cli.build_parser().parse_args(argv)
    assert callable(args.func)
