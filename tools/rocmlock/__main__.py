import sys

from rocmlock.cli import main

sys.exit(main())
