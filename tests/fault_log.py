"""Faults injected by tests/test_faults.py and their outcome; conftest prints the table at the end."""

FAULTS: list[dict] = []


def record(fault: str, survived: bool, points_lost: int, detail: str = "") -> None:
    FAULTS.append({"fault": fault, "survived": survived, "points_lost": points_lost, "detail": detail})
