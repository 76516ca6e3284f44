"""`python -m helpers [flags]`: run a job from the command line (helpers/launch/cli.py)."""
from helpers.launch.cli import main

if __name__ == "__main__":
    main()
