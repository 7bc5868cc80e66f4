"""The kwok provider's repair rules (contract 0.4), Karpenter's kwok provider's: ``Ready=False``
(the default) or ``Unknown`` for 10 minutes replaces the node without draining it; a simulated fault
(:data:`UNHEALTHY_CONDITION`) for 30 seconds replaces it, draining for at most 45 seconds;
:data:`REBOOT_REQUIRED_CONDITION` for 30 seconds reboots it, draining for at most a minute."""

from __future__ import annotations

from capstan_provider import lifecycle

UNHEALTHY_CONDITION = "KWOKUnhealthy"
"""A node condition that simulates a fault (Karpenter's kwok provider's name): a node with it
``True`` for 30 seconds is replaced. kwok's heartbeats never touch it."""

REBOOT_REQUIRED_CONDITION = "KWOKRebootRequired"
"""A node condition that simulates a fault a reboot cures: a node with it ``True`` for 30 seconds
is rebooted."""


def rules() -> list[lifecycle.RepairRule]:
    """The rules, as the Rust kwok provider's ``repair_rules``."""
    rule = lifecycle.repair_rule
    return [
        rule("Ready", "False", 600, reason_regex="", termination_grace_seconds=0),
        rule("Ready", "Unknown", 600, termination_grace_seconds=0),
        rule(UNHEALTHY_CONDITION, "True", 30, termination_grace_seconds=45),
        rule(REBOOT_REQUIRED_CONDITION, "True", 30, termination_grace_seconds=60, reboot=True),
    ]
