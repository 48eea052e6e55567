import sys

from waldio.cli import main

sys.exit(main())
