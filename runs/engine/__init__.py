"""The execution engine core: plain Python, no Django (see ../shared/DESIGN.md)."""
