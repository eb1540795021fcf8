"""Reading a recording: the resize timeline and why each bucket count."""
