"""The console's run pages: the runs list with its start, cancel and re-run (`listing`), and
one run's live trace (`trace`). Two modules, one room each, gathered by runs/urls.py."""
