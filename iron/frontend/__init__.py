"""The front end: what a user writes (Graph, declarations, handles) and tracing it into a Program."""
