"""Tools for a method's author: ``check_method(cls)`` runs the conformance kit (``conformance``) that
``explorer check-method NAME`` runs, so a plugin's own test suite says whether it fits the app."""

from explorer.testing.conformance import CHECKS, CheckResult, check_method, run_checks

__all__ = ["CHECKS", "CheckResult", "check_method", "run_checks"]
