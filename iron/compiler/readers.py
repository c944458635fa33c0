"""Who reads a tensor besides a kernel call or a fused group: the tags the compiler's readers
tables hold beside calls (`padding.readers_of`) and group names (`place.outside_users`)."""
from __future__ import annotations

from iron.ir import Term


class Reader(Term):   # a rule's text names it as it names a group: "emit"
    HOST = "host"     # the host: an output (in `outside_users`, a carried element too)
    VIEW = "view"     # a view of the tensor, which calls read
    CARRY = "carry"   # a next carried value
    EMIT = "emit"     # the Emit core, which reads a carried element on a device with one
