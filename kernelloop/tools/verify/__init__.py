"""The verifier: parent (judge), child program (harness), comparison, rules, speed verdict, pool."""
