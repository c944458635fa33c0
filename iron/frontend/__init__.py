"""The front end: what a user writes (Graph, declarations, handles, the arguments of a call) and
tracing it into a Program for the reference and the compiler.
"""
