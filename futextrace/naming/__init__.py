"""What each futex is: the mapping, section and data symbol of its address
(maps.py: /proc/PID/maps snapshots; capture.py: taken while processes live;
elfsyms.py: ELF symbols, parsed once per file; resolve.py: one address's
name; recorded.py: the recording's addresses named), and where it is used
from (callsites.py: a user stack's frames named by function, trusted as far
as frame pointers go)."""
