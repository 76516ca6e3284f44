"""`python -m helpers.lessons`: helpers/lessons/cli.py."""
import sys

from helpers.lessons.cli import main

sys.exit(main())
