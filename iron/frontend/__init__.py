"""The front end: what a user writes (Graph, declarations, handles) and tracing it into a Program.

It does not compile or run on a device; it hands Programs to the reference and the compiler."""
