"""The routed adapter mixture and its server (docs/method.md, "Routed mixture").

- `lora_weights`: PEFT LoRA folders as tensors; `mixture`: the routed linear layers, per-layer
  gates and routing overrides, built into a transformers model in place;
- `router_data`: token-labelled oracle dialogues; `router_training`: gates fitted on hidden
  states (cross-entropy + load balance), held-out routing accuracy;
- `task_router`: the method's v1 router (one adapter per task from label tokens);
- `route`: `tracegym route`'s work; `folder`: the routed folder and `load_policy`;
- `chat_api`: the OpenAI wire format; `logprobs`: vLLM's log-probability entries; `request`: a
  generation request and where its reply goes; `scheduler`: the running rows of continuous
  batching (join at a token boundary, leave when done); `engine`: the worker that schedules them
  behind a bounded queue; `lora_slots`: LoRA slots in a base model, filled
  while it serves; `lora_registry`: adapters by name, loaded at start or at run time, checked;
  `served`: what a server serves (a routed folder or a base model); `middleware`: body limit,
  API key, error shape; `server`: the FastAPI app; `config`: route and serve settings;
  `route_cli`: `tracegym route`; `serve_cli`: `tracegym serve`.
"""
