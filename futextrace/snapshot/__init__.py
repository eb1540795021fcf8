"""`snapshot`: each process's futex hash now, from the task iterator, or by
watching futex calls where it is missing (hashwatch.py), and `--watch`
(watcher.py); its table's text is output/hashes_text.py."""
