"""What the tests share: command helpers and skip guards (host.py), the tests' own
reference code (fidelity_ref.py: jhash2), workloads and recordings made for the tests
(holders.py, recordings.py, synthetic.py, events.py), the exporter and Prometheus
servers the tests start (serve.py), and checks of files and pictures. Test files
import from here, never from each other; conftest.py files hold only fixtures."""
