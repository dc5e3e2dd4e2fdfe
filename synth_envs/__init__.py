"""Synthetic capability environments: seeded, verifiable, multi-turn tool environments.

- `base`: the Environment API (reset/step/tools/system_prompt, oracle, gold_answer, hint, knobs)
  and `play` for scripted turns;
- `registry`: capability name -> family, `make_env`, matching a CapabilityReport to families;
- `families/`: one module per capability (seven families);
- `checks`: oracle checks every generated episode passes (else it is regenerated);
- `calibration`: knob search against a policy until the mean reward is in the target band;
- `sandbox`: the contained test runner of the code-repair family;
- `trl_adapter`: any environment as a TRL `environment_factory`;
- `cli`: `tracegym envs list|show` and `tracegym synth`.
"""
