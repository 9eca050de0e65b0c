"""Fakes of outside services, run for real on loopback (never patched into the code)."""
