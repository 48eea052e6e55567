"""lists — which of SQLite's test files run against waldio (provisional)."""
from __future__ import annotations

from typing import Dict, List

ALL: List[str] = """
backup.test backup2.test backup4.test backup5.test backup_ioerr.test backup_malloc.test
e_wal.test e_walauto.test e_walckpt.test e_walhook.test
incrvacuum.test incrvacuum2.test incrvacuum3.test incrvacuum_ioerr.test
pager1.test pager2.test pager3.test pager4.test pagerfault.test pagerfault2.test
pagerfault3.test pageropt.test
savepoint.test savepoint2.test savepoint4.test savepoint5.test savepoint6.test
savepoint7.test savepointfault.test
wal.test wal2.test wal3.test wal4.test wal5.test wal6.test wal64k.test wal7.test
wal8.test wal9.test walbak.test walbig.test walblock.test walcksum.test walcrash.test
walcrash2.test walcrash3.test walcrash4.test walfault.test walfault2.test walhook.test
walmode.test walnoshm.test waloverwrite.test walpersist.test walprotocol.test
walprotocol2.test walro.test walro2.test walrofault.test walsetlk.test walshared.test
walslow.test walthread.test walvfs.test
""".split()

LISTS: Dict[str, List[str]] = {"all": ALL, "full": ALL}
