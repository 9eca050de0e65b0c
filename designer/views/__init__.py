"""The designer's pages, one module per room: `workspaces` (the designer's home), `tree` (a
workspace's hierarchy), `editor` (one entity's definition), `versions` (its history). Gathered
by designer/urls.py."""
