"""`python -m helpers.advisor`: helpers/advisor/cli.py."""
import sys

from helpers.advisor.cli import main

sys.exit(main())
