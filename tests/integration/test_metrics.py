#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Metrics integration test (statsd over UDP/TCP, Prometheus endpoint).

Placeholder until the daemon exposes the metrics options: skips."""
import sys

print("0 passed, 0 failed, 1 skipped")
sys.exit(77)
