"""The lesson notebooks run on GPUs where papermill is not installed."""
