import sys

from h3kit.cli import main

sys.exit(main())
