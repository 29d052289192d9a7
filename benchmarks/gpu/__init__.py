"""The GPU acceptance run (acceptance.sh, acceptance.py) and the helper that prepares what it carries (prepare.sh)."""
