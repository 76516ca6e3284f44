"""`python -m helpers.launch [flags]`: the same command line as `python -m helpers`."""
from helpers.launch.cli import main

if __name__ == "__main__":
    main()
