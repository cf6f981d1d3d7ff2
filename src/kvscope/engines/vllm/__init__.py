"""vLLM engine model: version defaults (``args``), KV planning (``kv_cache``), startup simulation
(``memory``) and the ``plan`` use-case (``plan``). Logs and hooks belong to the doctor/probe helpers."""
