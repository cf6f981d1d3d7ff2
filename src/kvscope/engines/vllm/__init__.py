"""vLLM engine model, one module per stage (the same names as engines/sglang where the stage is the same):
``release`` (the release-traits table), ``args`` (flags -> resolved args), ``backend`` (attention backend
and block size), ``max_len`` (max_model_len), ``kv_cache`` (KV specs, groups, blocks), ``memory`` (budget,
profile, available memory, capacity), ``deepseek_v4`` (its packed KV layout), ``decision`` (typed
records) and the ``plan`` use-case. Logs and hooks belong to the doctor/probe helpers."""
