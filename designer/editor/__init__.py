"""The entity editor: a definition in the exchange format, edited as sections of forms.

`document.py` holds the working definition and the editor's operations on it (build the
sections, apply them, place the services' problems at the field they are about); each section
(`identity.py`, `model.py`, …) is a form over one part of the definition that knows the paths
it edits. The raw JSON of the whole definition is the advanced view of the same document.
"""
