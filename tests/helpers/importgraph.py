"""scripts/import-cycles.py loaded as a module (tests/unit/test_import_graph.py, test_recording_types.py)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "import-cycles.py"


def load_script():
    spec = importlib.util.spec_from_file_location("import_cycles", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
