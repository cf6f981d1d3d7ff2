"""vLLM's own attention-backend selection and default KV block size, per release (0.19+).

Engine side (read from the release wheel; nothing is re-typed here):

* ``CudaPlatformBase.get_attn_backend_cls`` / ``get_valid_backends`` / ``_get_backend_priorities``
  (``vllm/platforms/cuda.py``), the device-capability helpers of ``Platform``
  (``vllm/platforms/interface.py``);
* every candidate backend class (``vllm/v1/attention/backends/**``, the base ``AttentionBackend``
  in ``vllm/v1/attention/backend.py``, ``MLACommonBackend``) with its ``validate_configuration``,
  supported / preferred kernel block sizes, head sizes, KV dtypes, capability checks;
* the helpers those call (``fa_utils.py``, ``vllm_flash_attn/flash_attn_interface.py``,
  ``vllm/utils/flashinfer.py``, ``vllm/v1/attention/ops/flashmla.py`` ...);
* ``Platform.update_block_size_for_backend`` (phase 1: the block size the first layer's backend
  prefers, 0.33: the smallest size all backends accept).

A *lazy module* executes the engine module's top-level ``def``/``class`` statements on first use
(annotations and decorators other than ``staticmethod``/``classmethod``/``property`` dropped), and
resolves the module's own imports against the same wheel. Stand-ins replace only what is not
selection logic: the device (capability of the case), torch dtypes, ``vllm.envs`` (defaults read from
``envs.py``), the current ``VllmConfig`` (the case's model/cache config), logging, and the compiled
kernels' presence (``FA2/3/4_AVAILABLE``, ``has_flashinfer`` ... = available). Unknown names fail loudly.

Model-construction facts (not engine selection code) are given by the case: the attention layers
in construction order, i.e. the DSA indexer K cache (``DeepseekV32IndexerCache``, created before the
MLA layer in ``deepseek_v2.py``) ahead of the sparse MLA layer.
"""
from __future__ import annotations

import ast
import builtins
import functools
import importlib
import types
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from . import loader
from .vllm_engine_mem import _Logger, env_default, vtuple
from .wheels import EngineSource, engine_source


# ---------------------------------------------------------------------------------------------
# lazy engine modules
# ---------------------------------------------------------------------------------------------

_KEEP = {"staticmethod", "classmethod", "property"}


class _Strip(ast.NodeTransformer):
    """Drop annotations (evaluated at class/def time) and decorators other than _KEEP."""

    def visit_FunctionDef(self, node: ast.FunctionDef) -> Any:
        self.generic_visit(node)
        node.decorator_list = [d for d in node.decorator_list if isinstance(d, ast.Name) and d.id in _KEEP]
        node.returns = None
        for a in node.args.args + node.args.posonlyargs + node.args.kwonlyargs:
            a.annotation = None
        if node.args.vararg:
            node.args.vararg.annotation = None
        if node.args.kwarg:
            node.args.kwarg.annotation = None
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_AnnAssign(self, node: ast.AnnAssign) -> Any:
        # keep the field (NamedTuple / dataclass), annotation as a plain string
        node.annotation = ast.copy_location(ast.Constant(ast.unparse(node.annotation)), node.annotation)
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> Any:
        self.generic_visit(node)
        node.decorator_list = [d for d in node.decorator_list if "dataclass" in ast.unparse(d)]
        node.keywords = [k for k in node.keywords if k.arg == "metaclass"]
        if not node.body:
            node.body = [ast.Pass()]
        return node


def _top_level(body: List[ast.stmt]) -> List[ast.stmt]:
    out: List[ast.stmt] = []
    for s in body:
        if isinstance(s, (ast.If, ast.Try)):
            out += _top_level(list(s.body) + list(getattr(s, "orelse", [])) + list(getattr(s, "finalbody", [])))
        else:
            out.append(s)
    return out


@functools.lru_cache(maxsize=256)
def _own_tree(text: str, origin: str) -> ast.Module:
    """A parse of our own (the defs are stripped in place; ``loader._parse``'s cached trees are
    shared with the other harnesses)."""
    return ast.parse(text, filename=origin)


def _literals(tree: ast.Module) -> Dict[str, Any]:
    """Module-level ``NAME = <literal>`` constants (``loader.module_literals`` on our own parse)."""
    out: Dict[str, Any] = {}
    for st in tree.body:
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
            name, value = st.targets[0].id, st.value
        elif isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name) and st.value is not None:
            name, value = st.target.id, st.value
        else:
            continue
        try:
            out[name] = ast.literal_eval(value)
        except ValueError:
            pass
    return out


class _ModGlobals(dict):
    def __init__(self, mod: "LazyModule"):
        super().__init__()
        self.mod = mod

    def __missing__(self, key: str) -> Any:
        if key == "__builtins__":
            return builtins
        val = self.mod._resolve(key)
        self[key] = val
        return val


class LazyModule(types.ModuleType):
    def __init__(self, env: "EngineEnv", name: str, member: str):
        super().__init__(name)
        self._env, self._member = env, member
        self._origin = env.origin(member)
        text = env.src.read(member)
        tree = _own_tree(text, self._origin)
        self._defs: Dict[str, ast.stmt] = {}
        self._imports: Dict[str, Tuple[str, Optional[str]]] = {}  # local name -> (module, attr or None)
        self._literals = _literals(tree)
        pkg = name if member.endswith("__init__.py") else name.rsplit(".", 1)[0]
        for s in _top_level(tree.body):
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self._defs[s.name] = s
            elif isinstance(s, ast.ImportFrom):
                base = s.module or ""
                if s.level:
                    parts = pkg.split(".")
                    parts = parts[: len(parts) - (s.level - 1)]
                    base = ".".join(parts + ([s.module] if s.module else []))
                for a in s.names:
                    self._imports[a.asname or a.name] = (base, a.name)
            elif isinstance(s, ast.Import):
                for a in s.names:
                    if a.asname:
                        self._imports[a.asname] = (a.name, None)
                    else:
                        top = a.name.split(".")[0]
                        self._imports[top] = (top, None)
        g = _ModGlobals(self)
        g["__name__"] = name
        g["__builtins__"] = env.builtins
        self._g = g

    def __getattr__(self, item: str) -> Any:
        if item.startswith("__"):
            raise AttributeError(item)
        return self._g[item]

    def _defines(self, name: str) -> bool:
        return name in self._defs or name in self._imports or name in self._literals

    def _preload(self, cls: ast.ClassDef) -> None:
        """Class bodies look globals up with LOAD_NAME, which skips ``__missing__``: resolve the
        names the body itself (not its methods) reads before executing it."""
        todo: List[ast.AST] = list(cls.bases) + [k.value for k in cls.keywords] + list(cls.decorator_list)
        for s in cls.body:
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
                todo += s.decorator_list + [d for d in s.args.defaults + s.args.kw_defaults if d is not None]
            else:
                todo.append(s)
        for t in todo:
            for n in ast.walk(t):
                if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and not dict.__contains__(self._g, n.id):
                    try:
                        self._g[n.id]
                    except loader.StandInMissing:
                        pass

    def _resolve(self, key: str) -> Any:
        env = self._env
        over = env.overrides.get(key)
        if over is not None:
            return over
        if key.startswith("has_flashinfer"):
            return lambda *_a, **_k: True  # flashinfer-python (+ cubins): a dependency of the wheel
        if key in self._defs:
            node = _Strip().visit(self._defs[key])  # in place: this module's own parse, idempotent
            if isinstance(node, ast.ClassDef):
                self._preload(node)
            code = compile(ast.fix_missing_locations(ast.Module(body=[node], type_ignores=[])), self._origin, "exec")
            exec(code, self._g)
            return dict.__getitem__(self._g, key)
        if key in self._literals:
            return self._literals[key]
        if key in self._imports:
            mod, attr = self._imports[key]
            return env.import_from(mod, attr, self._origin)
        if key in env.module_values:
            return env.module_values[key]
        if hasattr(builtins, key):
            return getattr(builtins, key)
        raise loader.StandInMissing(f"conformance: no stand-in for engine global {key!r} used in {self._origin}")


class EngineEnv:
    """Lazy modules of one release plus the stand-ins shared by all of them."""

    def __init__(self, src: EngineSource, standin_modules: Dict[str, Any], overrides: Dict[str, Any],
                 module_values: Dict[str, Any]):
        self.src = src
        self.standin_modules = standin_modules  # import name -> module-like object
        self.overrides = overrides  # a global name -> value in every engine module (current_platform ...)
        self.module_values = module_values  # fallback for non-literal module constants
        self.modules: Dict[str, Any] = {}
        real_import = builtins.__import__

        def fake_import(name: str, globals_: Any = None, locals_: Any = None, fromlist: Any = (), level: int = 0):
            if level:
                pkg = (globals_ or {}).get("__name__", "")
                parts = pkg.split(".")[: -level] if level else []
                name = ".".join(parts + ([name] if name else []))
            if name == "tokenspeed_mla":  # tokenspeed-mla: a Linux dependency of the wheel (0.26+)
                return types.ModuleType("tokenspeed_mla")
            if name in self.standin_modules or name.split(".")[0] in ("vllm", "torch", "triton", "flashinfer"):
                mod = self.module(name)
                if fromlist:
                    return mod
                return self.module(name.split(".")[0])
            return real_import(name, globals_, locals_, fromlist, level)

        self.builtins = dict(vars(builtins))
        self.builtins["__import__"] = fake_import

    def origin(self, member: str) -> str:
        return f"{self.src.label}/{member}"

    def member_of(self, name: str) -> Optional[str]:
        path = name.replace(".", "/")
        for m in (path + ".py", path + "/__init__.py"):
            if self.src.has(m):
                return m
        return None

    def module(self, name: str) -> Any:
        if name in self.standin_modules:
            return self.standin_modules[name]
        if name not in self.modules:
            m = self.member_of(name) if name.startswith("vllm") else None
            if m is None:
                raise loader.StandInMissing(f"conformance: no stand-in for module {name!r}")
            self.modules[name] = LazyModule(self, name, m)
        return self.modules[name]

    def import_from(self, mod: str, attr: Optional[str], origin: str) -> Any:
        if attr is None:
            if mod in self.standin_modules or mod.split(".")[0] in ("vllm", "torch"):
                return self.module(mod)
            return importlib.import_module(mod)
        full = f"{mod}.{attr}"
        if full in self.standin_modules:
            return self.standin_modules[full]
        if mod in self.standin_modules:
            obj = self.standin_modules[mod]
            try:
                return getattr(obj, attr)
            except AttributeError:
                raise loader.StandInMissing(f"conformance: stand-in {mod} lacks {attr!r} ({origin})") from None
        if mod.split(".")[0] in ("vllm",):
            parent = self.module(mod)
            if isinstance(parent, LazyModule) and parent._defines(attr):
                return getattr(parent, attr)
            if self.member_of(full) is not None:  # a submodule (``from vllm.x import y``)
                return self.module(full)
            return getattr(parent, attr)
        if mod.split(".")[0] in ("torch", "triton", "flashinfer"):
            raise loader.StandInMissing(f"conformance: no stand-in for {full} ({origin})")
        return getattr(importlib.import_module(mod), attr)


# ---------------------------------------------------------------------------------------------
# stand-ins
# ---------------------------------------------------------------------------------------------

class _DType:
    def __init__(self, name: str, size: int):
        self.name, self.itemsize = name, size

    def __repr__(self) -> str:
        return f"torch.{self.name}"


def _torch() -> types.SimpleNamespace:
    t = types.SimpleNamespace(float16=_DType("float16", 2), bfloat16=_DType("bfloat16", 2),
                              float32=_DType("float32", 4), uint8=_DType("uint8", 1),
                              float8_e4m3fn=_DType("float8_e4m3fn", 1), float8_e5m2=_DType("float8_e5m2", 1),
                              int8=_DType("int8", 1), dtype=_DType, Tensor=object,
                              nn=types.SimpleNamespace(Module=object))
    t.get_default_dtype = lambda: t.bfloat16
    return t


class _NS(types.SimpleNamespace):
    """Namespace whose missing attributes fail loudly."""

    def __getattr__(self, item: str) -> Any:
        if item.startswith("__"):
            raise AttributeError(item)
        raise loader.StandInMissing(f"conformance: stand-in lacks {item!r}")


class _CacheMod(types.SimpleNamespace):
    """``vllm.config.cache``: ``CacheConfig.DEFAULT_BLOCK_SIZE`` (read from the file), the rest of the
    module (``get_kv_cache_dtype_handler`` ...) run from the engine's file."""

    def __getattr__(self, item: str) -> Any:
        if item.startswith("__") or item == "_real":
            raise AttributeError(item)
        return getattr(self.__dict__["_real"], item)


@dataclass(frozen=True)
class BackendCase:
    capability: Tuple[int, int]
    use_mla: bool
    use_sparse: bool
    head_size: int  # MLA: kv_lora_rank + qk_rope_head_dim
    kv_cache_dtype: str
    user_block_size: Optional[int]
    num_heads: int  # attention heads per rank
    num_kv_heads: int = 8
    qk_nope_head_dim: int = 128
    has_sink: bool = False
    index_topk: bool = False  # the sparse model's hf config has index_topk (DSA)
    is_hybrid: bool = False  # attention + mamba: phase 1 only (phase 2 is kv_cache.py's)
    rocm_arch: Optional[str] = None  # "gfx942" / "gfx950": RocmPlatform, capability 9.4 / 9.5
    selected: Optional[str] = None  # --attention-backend (AttentionBackendEnum name)


@dataclass
class BackendResult:
    backend: Optional[str]  # backend name of the (first) attention layer
    block_size: Optional[int]
    error: Optional[str] = None
    kv_cache_dtype: Optional[str] = None  # MLA: cache dtype after MLAAttention's sparse canonicalisation


class VllmBackend:
    """One vLLM release's backend selection and block-size default (CUDA platform)."""

    def __init__(self, version: str):
        self.version = version
        self.v = vtuple(version)
        self.src: EngineSource = engine_source("vllm", version)
        self.case: Optional[BackendCase] = None
        self._envs: Dict[Optional[str], Tuple[EngineEnv, Any]] = {}
        self._arch: Optional[str] = None

    # ---- environment --------------------------------------------------------------------------
    def env(self, arch: Optional[str] = None) -> EngineEnv:
        """The lazy modules for CUDA (``arch`` None) or one ROCm GCN arch (e.g. "gfx942"): the ROCm
        module reads the arch once at import (``_GCN_ARCH``), so each arch gets its own set."""
        if arch not in self._envs:
            self._arch = arch
            env = self._build_env(arch)
            self._envs[arch] = (env, self.platform)
        env, self.platform = self._envs[arch]
        return env

    def _build_env(self, arch: Optional[str] = None) -> EngineEnv:
        eng = self
        envs_text = self.src.read("vllm/envs.py")
        envs_origin = f"{self.src.label}/vllm/envs.py"

        env_cache: Dict[str, Any] = {}

        class _Envs:
            def __getattr__(self, item: str) -> Any:
                if item.startswith("__"):
                    raise AttributeError(item)
                if item not in env_cache:
                    env_cache[item] = env_default(envs_text, envs_origin, item)
                return env_cache[item]

            def is_set(self, _name: str) -> bool:
                return False

        envs = _Envs()
        torch = _torch()

        def vllm_config() -> Any:
            c = eng.case
            hf = types.SimpleNamespace(qk_nope_head_dim=c.qk_nope_head_dim, attn_logit_softcapping=None,
                                       kv_lora_rank=512, qk_rope_head_dim=c.head_size - 512, v_head_dim=128,
                                       num_attention_heads=c.num_heads,
                     **({"index_topk": 2048} if c.index_topk else {}))
            model_config = _NS(
                hf_text_config=hf, hf_config=hf, is_hybrid=False, use_mla=c.use_mla, dtype=torch.bfloat16,
                attn_type="decoder",
                is_diffusion=False, is_mm_prefix_lm=False, rswa_window=None,
                get_head_size=lambda: c.head_size,
                get_num_attention_heads=lambda _pc=None: c.num_heads,
                get_num_kv_heads=lambda _pc=None: 1 if c.use_mla else c.num_kv_heads)
            cache_config = _NS(cache_dtype=c.kv_cache_dtype, block_size=c.user_block_size or 16,
                               user_specified_block_size=c.user_block_size is not None,
                               mamba_ssm_cache_dtype="auto", mamba_cache_dtype="auto",
                               kv_cache_dtype_skip_layers=None)
            return _NS(model_config=model_config, cache_config=cache_config,
                       parallel_config=_NS(decode_context_parallel_size=1, prefill_context_parallel_size=1,
                                           tensor_parallel_size=1, data_parallel_size=1),
                       attention_config=_NS(backend=None, flash_attn_version=None, use_trtllm_attention=None,
                                            disable_flashinfer_prefill=False, use_prefill_decode_attention=False),
                       speculative_config=None, compilation_config=_NS(static_forward_context={}))

        eng._vllm_config_fn = vllm_config
        config_mod = _NS(get_current_vllm_config=lambda: eng._current_config,
                         get_current_vllm_config_or_none=lambda: eng._current_config,
                         set_current_vllm_config=lambda *a, **k: _nullctx())
        cache_mod = _CacheMod(CacheConfig=_NS(DEFAULT_BLOCK_SIZE=self._default_block_size()))
        fa_iface = _NS()  # filled below (engine code of vllm_flash_attn/flash_attn_interface.py)
        standins: Dict[str, Any] = {
            "torch": torch, "vllm.envs": envs, "vllm.config": config_mod, "vllm.config.vllm": config_mod,
            "vllm.config.cache": cache_mod,
            "vllm.logger": _NS(init_logger=lambda *_a: _Logger()),
            "vllm.platforms": None,  # set after the platform is built
            "vllm.vllm_flash_attn.flash_attn_interface": fa_iface,
            "vllm.vllm_flash_attn": _NS(flash_attn_interface=fa_iface, flash_attn_varlen_func=object(),
                                        get_scheduler_metadata=object()),
        }
        overrides = {"logger": _Logger(), "envs": envs, "torch": torch,
                     "get_current_vllm_config": config_mod.get_current_vllm_config,
                     "get_current_vllm_config_or_none": config_mod.get_current_vllm_config_or_none}
        env = EngineEnv(self.src, standins, overrides, {})
        cfg_vllm = LazyModule(env, "vllm.config.vllm", "vllm/config/vllm.py")
        cache_real = LazyModule(env, "vllm.config.cache", "vllm/config/cache.py")
        cache_mod.__dict__["_real"] = cache_real
        config_mod.get_layers_from_vllm_config = cfg_vllm.get_layers_from_vllm_config

        def resolve_obj_by_qualname(qualname: str) -> Any:
            mod, name = qualname.rsplit(".", 1)
            return getattr(env.module(mod), name)

        overrides["resolve_obj_by_qualname"] = resolve_obj_by_qualname
        # kernel availability: present (no network probe of NVIDIA's cubin artifactory)
        overrides["has_nvidia_artifactory"] = lambda: True
        overrides["has_flashinfer_cubin"] = lambda: True
        # batch_invariant.py's module-level flag (0.18.0): os.getenv("VLLM_BATCH_INVARIANT", "0") unset
        overrides["VLLM_BATCH_INVARIANT"] = False
        # the platform: the engine's Platform + CudaPlatformBase (RocmPlatform) classmethods,
        # device from the case
        iface = env.module("vllm.platforms.interface")
        cap_cls = iface.DeviceCapability
        rocm = arch is not None
        if rocm:
            # vllm/platforms/rocm.py reads the GCN arch at import; aiter ships in vLLM's ROCm images
            # (the ``_ON_*`` flags: the module's own top-level expressions, evaluated on the case's arch)
            values: Dict[str, Any] = {"_GCN_ARCH": arch}
            rtext = self.src.read("vllm/platforms/rocm.py")
            rorigin = f"{self.src.label}/vllm/platforms/rocm.py"
            for st in loader._parse(rtext, rorigin).body:
                if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name) \
                        and st.targets[0].id.startswith("_ON_"):
                    expr = ast.Expression(body=st.value)
                    values[st.targets[0].id] = eval(compile(expr, rorigin, "eval"),
                                                    dict(values, __builtins__=builtins))
            env.module_values.update(values)
            env.module_values["IS_AITER_FOUND"] = True
            base = env.module("vllm.platforms.rocm").RocmPlatform
        else:
            base = env.module("vllm.platforms.cuda").CudaPlatformBase

        class CaseCudaPlatform(base):  # type: ignore[misc, valid-type]
            device_name = "rocm" if rocm else "cuda"
            device_type = "cuda"

            @classmethod
            def get_device_capability(cls, device_id: int = 0) -> Any:
                return cap_cls(*eng.case.capability)

            @classmethod
            def _align_hybrid_block_size(cls, vllm_config: Any, *_a: Any) -> None:
                # phase 2 (mamba alignment) is kv_cache.hybrid_kernel_block_alignment's,
                # conformance-tested in test_vllm_kv_cache.py: recorded, not run here
                eng._phase2 = True

            def is_cuda(self) -> bool:
                return not rocm

            def is_cuda_alike(self) -> bool:
                return True

            def is_rocm(self) -> bool:
                return rocm

            def is_xpu(self) -> bool:
                return False

            def is_cpu(self) -> bool:
                return False

            def is_tpu(self) -> bool:
                return False

        platform = CaseCudaPlatform()
        self.platform = platform
        standins["vllm.platforms"] = _NS(current_platform=platform, CpuArchEnum=_NS())
        overrides["current_platform"] = platform
        # compiled kernels: present
        fa = env.module_values
        fa.update({"FA2_AVAILABLE": True, "FA3_AVAILABLE": True, "FA4_AVAILABLE": True,
                   "FA2_UNAVAILABLE_REASON": None, "FA3_UNAVAILABLE_REASON": None,
                   "FA4_UNAVAILABLE_REASON": None, "_flashmla_C_AVAILABLE": True,
                   "_flashmla_extension_C_AVAILABLE": True})
        fai = "vllm/vllm_flash_attn/flash_attn_interface.py"
        if self.src.has(fai):
            real = LazyModule(env, "vllm.vllm_flash_attn.flash_attn_interface", fai)
            for n in ("is_fa_version_supported", "fa_version_unsupported_reason"):
                setattr(fa_iface, n, getattr(real, n))
        self.cap_cls = cap_cls
        self._current_config = None
        return env

    # ---- engine calls -------------------------------------------------------------------------
    def backend_class(self, enum_name: str) -> Any:
        env = self.env()
        reg = env.module("vllm.v1.attention.backends.registry")
        path = reg.AttentionBackendEnum[enum_name].value
        mod, cls = path.rsplit(".", 1)
        return getattr(env.module(mod), cls)

    def select(self, c: BackendCase) -> BackendResult:
        """Backend of the MLA / attention layer, then the block size after phase 1 of
        ``update_block_size_for_backend`` (user ``--block-size`` kept)."""
        env = self.env(c.rocm_arch)
        self.case = c
        self._current_config = self._vllm_config_fn()
        sel = env.module("vllm.v1.attention.selector")
        cfg_cls = sel.AttentionSelectorConfig
        fields = cfg_cls._fields
        kw = dict(head_size=c.head_size, dtype=env.standin_modules["torch"].bfloat16,
                  kv_cache_dtype=c.kv_cache_dtype, block_size=c.user_block_size, use_mla=c.use_mla,
                  has_sink=c.has_sink, use_sparse=c.use_sparse)
        kw = {k: v for k, v in kw.items() if k in fields}
        cfg = cfg_cls(**kw)
        plat = self.platform
        selected = None
        if c.selected is not None:
            reg = env.module("vllm.v1.attention.backends.registry")
            selected = reg.AttentionBackendEnum[c.selected]
            self._current_config.attention_config.backend = selected
        try:
            path = plat.get_attn_backend_cls(selected, cfg, num_heads=c.num_heads)
        except ValueError as exc:
            return BackendResult(None, None, str(exc))
        mod, cls_name = path.rsplit(".", 1)
        backend = getattr(env.module(mod), cls_name)
        name = backend.get_name()
        layers = [backend]
        if c.use_sparse and c.index_topk:
            # DeepseekV32IndexerCache is registered before the MLA layer (models/deepseek_v2.py)
            idx = env.module("vllm.v1.attention.backends.mla.indexer")
            layers = [idx.DeepseekV32IndexerBackend, backend]
        base = env.module("vllm.model_executor.layers.attention_layer_base").AttentionLayerBase

        class _Layer(base):  # type: ignore[misc, valid-type]
            def __init__(self, b: Any):
                self.b = b

            def get_attn_backend(self) -> Any:
                return self.b

            def get_kv_cache_spec(self, *_a: Any) -> Any:
                return None

        cfg_now = self._current_config
        cfg_now.compilation_config.static_forward_context = {
            f"model.layers.0.{i}": _Layer(b) for i, b in enumerate(layers)}
        cfg_now.model_config.is_hybrid = c.is_hybrid
        self._phase2 = False
        type(plat).update_block_size_for_backend(cfg_now)
        kv = self._mla_kv_dtype(backend, c.kv_cache_dtype) if c.use_mla else c.kv_cache_dtype
        return BackendResult(name, cfg_now.cache_config.block_size, kv_cache_dtype=kv)

    def _mla_kv_dtype(self, backend: Any, kv: str) -> str:
        """``MLAAttention.__init__`` after backend selection: v0.26+
        ``_canonicalize_sparse_mla_kv_cache_dtype``; before, the inline ``if`` that assigns
        ``kv_cache_dtype = "fp8_ds_mla"`` (its test evaluated as written)."""
        env = self.env(self.case.rocm_arch)
        m = "vllm/model_executor/layers/attention/mla_attention.py"
        mod = env.module("vllm.model_executor.layers.attention.mla_attention")
        text = self.src.read(m)
        tree = _own_tree(text, f"{self.src.label}/{m}")
        if any(isinstance(n, ast.FunctionDef) and n.name == "_canonicalize_sparse_mla_kv_cache_dtype"
               for n in tree.body):
            return mod._canonicalize_sparse_mla_kv_cache_dtype(backend, kv)
        init = loader.find_def(tree, "MLAAttention.__init__")
        for node in ast.walk(init):
            if isinstance(node, ast.If) and any(
                    isinstance(b, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "kv_cache_dtype"
                                                      for t in b.targets)
                    and isinstance(b.value, ast.Constant) and b.value.value == "fp8_ds_mla" for b in node.body):
                test = compile(ast.Expression(body=node.test), f"{self.src.label}/{m}", "eval")
                host = types.SimpleNamespace(attn_backend=backend)
                for n in ast.walk(node.test):  # LOAD_NAME skips __missing__: resolve first
                    if isinstance(n, ast.Name) and n.id not in ("self", "kv_cache_dtype"):
                        mod._g[n.id]
                if eval(test, mod._g, {"self": host, "kv_cache_dtype": kv}):
                    return "fp8_ds_mla"
        return kv

    def _default_block_size(self) -> int:
        text = self.src.read("vllm/config/cache.py")
        for node in ast.walk(loader._parse(text, f"{self.src.label}/vllm/config/cache.py")):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and \
                    node.target.id == "DEFAULT_BLOCK_SIZE":
                return ast.literal_eval(node.value)
        return 16  # before 0.19 (no DEFAULT_BLOCK_SIZE): check_and_update_config sets 16 itself


class _nullctx:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *a: Any) -> bool:
        return False


_MEMBERS = (
    "vllm/_aiter_ops.py", "vllm/config/cache.py", "vllm/config/vllm.py", "vllm/envs.py",
    "vllm/model_executor/layers/attention/mla_attention.py", "vllm/model_executor/layers/attention_layer_base.py",
    "vllm/platforms/cuda.py", "vllm/platforms/interface.py", "vllm/platforms/rocm.py", "vllm/utils/flashinfer.py",
    "vllm/utils/torch_utils.py", "vllm/v1/attention/backend.py", "vllm/v1/attention/backends/fa_utils.py",
    "vllm/v1/attention/backends/flash_attn.py", "vllm/v1/attention/backends/flashinfer.py",
    "vllm/v1/attention/backends/flex_attention.py", "vllm/v1/attention/backends/mla/cutlass_mla.py",
    "vllm/v1/attention/backends/mla/flashattn_mla.py", "vllm/v1/attention/backends/mla/flashattn_mla_sparse.py",
    "vllm/v1/attention/backends/mla/flashinfer_mla.py", "vllm/v1/attention/backends/mla/flashinfer_mla_sparse.py",
    "vllm/v1/attention/backends/mla/flashinfer_mla_sparse_sm90.py", "vllm/v1/attention/backends/mla/flashmla.py",
    "vllm/v1/attention/backends/mla/flashmla_sparse.py", "vllm/v1/attention/backends/mla/indexer.py",
    "vllm/v1/attention/backends/mla/rocm_aiter_mla_sparse.py", "vllm/v1/attention/backends/mla/tokenspeed_mla.py",
    "vllm/v1/attention/backends/mla/triton_mla.py", "vllm/v1/attention/backends/registry.py",
    "vllm/v1/attention/backends/rocm_aiter_unified_attn.py", "vllm/v1/attention/backends/rocm_attn.py",
    "vllm/v1/attention/backends/rocm_octave_attn.py", "vllm/v1/attention/backends/triton_attn.py",
    "vllm/v1/attention/backends/turboquant_attn.py", "vllm/v1/attention/backends/ultraquant_attn.py",
    "vllm/v1/attention/ops/flashmla.py", "vllm/attention/ops/flashmla.py", "vllm/v1/attention/selector.py", "vllm/v1/kv_cache_interface.py",
    "vllm/vllm_flash_attn/cute/interface.py", "vllm/vllm_flash_attn/flash_attn_interface.py",
)


def backend_members(version: str) -> Tuple[str, ...]:
    """Every wheel member the suite reads (members a release lacks are recorded as absent), so
    ``require_source`` fetches them in one go or skips cleanly."""
    return _MEMBERS


@functools.lru_cache(maxsize=None)
def engine(version: str) -> VllmBackend:
    return VllmBackend(version)


# ---------------------------------------------------------------------------------------------
# 0.16-0.18: the block size is still forced in CudaPlatformBase.check_and_update_config
# ---------------------------------------------------------------------------------------------

def check_and_update_block_size(version: str, c: BackendCase) -> int:
    """``cache_config.block_size`` after the release's ``CudaPlatformBase.check_and_update_config``
    (no ``--attention-backend``; FlashMLA compiled in), for ``c``'s capability / MLA / sparse /
    ``qk_nope_head_dim`` / ``--block-size``."""
    eng = engine(version)
    env = eng.env(None)
    eng.case = c
    plat = type(eng.platform)
    hf = types.SimpleNamespace(qk_nope_head_dim=c.qk_nope_head_dim,
                               **({"index_topk": 2048} if c.index_topk else {}))
    envs = env.standin_modules["vllm.envs"]
    envs.__dict__.pop("VLLM_ATTENTION_BACKEND", None)  # 0.12 writes CUTLASS_MLA into envs: reset per case
    graph_mode = types.SimpleNamespace(NONE="NONE", PIECEWISE="PIECEWISE", FULL="FULL")
    env.standin_modules["vllm.config"].CUDAGraphMode = graph_mode  # 0.12: from vllm.config import CUDAGraphMode
    cfg = types.SimpleNamespace(
        parallel_config=types.SimpleNamespace(worker_cls="auto", all2all_backend="allgather_reducescatter",
                                              data_parallel_size=1),
        compilation_config=types.SimpleNamespace(cudagraph_mode=graph_mode.PIECEWISE),
        model_config=types.SimpleNamespace(use_mla=c.use_mla, hf_config=hf, hf_text_config=hf,
                                           is_mm_prefix_lm=False),
        cache_config=types.SimpleNamespace(block_size=c.user_block_size),
        attention_config=types.SimpleNamespace(backend=None),
        scheduler_config=types.SimpleNamespace(is_multimodal_model=False, disable_chunked_mm_input=False),
    )
    eng._current_config = cfg
    plat.check_and_update_config(cfg)
    return cfg.cache_config.block_size
