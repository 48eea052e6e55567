"""waldio crash --real: crash states from the real kernel (issue 19).

The model of :mod:`waldio.crash` builds crash states from rules about the
page cache and a volatile device cache. This package checks the same
workloads and contracts on states that the real kernel makes: ext4, mounted
on a loop device over the image file of a FUSE block recorder
(crash/block_recorder.c), which logs every write and flush that reaches the
"device" — CrashMonkey's log-writes method, in user space. Crash states are
cut from that block log (every flush point; in-order prefixes, random subsets
and torn writes of what was volatile), mounted (the kernel replays its
journal), checked with ``e2fsck -fn`` and opened with the model's oracle;
each is also compared with the model's states at the same moment.

One concern per module, in dependency order:

* :mod:`.blocklog`  the block log's format: reading, writing, applying
* :mod:`.machine`   mkfs, the recorder process, loop devices, mounts, e2fsck
                    (every resource a context manager that cleans up)
* :mod:`.plan`      the table of runs (mode, workload, control or not)
* :mod:`.record`    recording one run on the real kernel
* :mod:`.recording` a recording read back: marks, acknowledgements, contracts
* :mod:`.states`    crash states (keys, recipes, images)
* :mod:`.model`     the cross-check of a real state against the model
* :mod:`.check`     checking states (mount, e2fsck, oracle, model)
* :mod:`.campaign`  campaigns in worker processes, artifacts, replay
* :mod:`.cli`       `waldio crash --real`

docs/crash.md, "Crash states from the real kernel", has the method, the
options and the results.
"""
