"""From kernel speedups to end-to-end answers: selectors, speedup inputs, matching, baseline,
Amdahl, timeline replay, scenarios, the `project` answer and `targets`."""
