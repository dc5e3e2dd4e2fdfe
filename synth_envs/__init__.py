"""Synthetic capability environments: seeded, verifiable, multi-turn tool environments.

- `base`: the base class of the families (the protocol of `tracegym.environment`: reset/step,
  system_prompt, oracle, gold_answer, hint; knobs, worlds, episode state) and `play` for scripted turns;
- `tools`: the `@tool` decorator: typed methods whose JSON schemas and argument checks come from
  their signatures and docstrings;
- `cache`: the bounded cache behind every memo (worlds, system prompts, verdicts, SQL results);
- `registry`: family registration, `make_env`, and the capability -> family table;
- `families/`: one module per family (seven);
- `checks`: oracle checks every generated episode passes (else it is regenerated);
- `calibration`: knob search against a policy until the mean reward is in the target band;
- `sandbox`: runs the code-repair family's untrusted code in a bubblewrap sandbox (namespaces,
  seccomp, limits; refuses where none can be set up) and grades it from outside;
  `sandbox_runner` is the program it runs inside;
- `degenerate`: five degenerate policies (refuse, answer without acting, do nothing, random
  valid calls, repeat the first tool) whose mean reward every family keeps low;
- `trl_adapter`: any family as a TRL `environment_factory`;
- `synthesise`: capabilities to environment specs (`synth_cli`: `tracegym synth`);
- `envs_cli`: `tracegym envs list|show`.
"""
