"""The C++/CUDA a load_inline extension may hold: an allowlist of what kernels and their host wrappers need.

A deny list of system calls missed what it did not name (issue 35: pybind11's `py::eval` ran Python
that rewrote the claims the parent reads; `read`, `write`, `dup`, `fcntl`, `clone`, `mkstemp`,
`at::launch` ...). So every identifier of an extension's source must be one of:

- the source's own: a macro it #defines (and its parameters), a type it declares (struct, class,
  union, enum and its values, typedef, using, template parameter, namespace alias), a function it
  defines with a body, a variable or parameter it declares;
- a name a kernel or its host wrapper needs (`ALLOWED_NAMES`, `ALLOWED_PATTERNS`): C++ keywords and
  built-in types, CUDA's qualifiers, built-in variables, intrinsics, atomics and runtime API, the
  C math library, a few libc helpers with no reach outside the process (printf, memcpy, malloc),
  torch's macros (TORCH_CHECK, AT_DISPATCH_*, C10_*), PYBIND11_MODULE and TORCH_EXTENSION_NAME;
- a qualified name under an allowed namespace (`ALLOWED_ROOTS`: std, torch, at, c10, cub, thrust,
  nvcuda, cooperative_groups, cuda), minus what reaches outside (`DENIED_MEMBERS`: threads, files,
  the environment, TorchScript, operator registration, at::launch), or under pybind11 (`py::`)
  only what a module definition needs (`PY_ALLOWED`: arg, module_, ...; never eval, exec, import,
  globals, object).

A function the source declares without a body is not its own (a prototype of libc's `read` is how
it reaches the C library without a header), nor is a name it gives to something of its own that
libc also has (`LIBC_NAMES`): an own `write(float*)` overload leaves libc's `write(int, ...)` a
call away. Member calls (`x.size(0)`) are left to the type they are called on, except pybind11's
`.attr` and `.import` and `.ptr`. Headers must be on `ALLOWED_HEADERS`.

This is a lint, not the boundary (the sandbox is): text the module builds at run time is not seen.
"""

from __future__ import annotations

import re

ALLOWED_HEADERS = re.compile(
    r"(?:torch/(?:extension|types|all|torch|python)\.h|torch/csrc/api/include/torch/\S+|ATen/\S+|c10/\S+|"
    r"cuda(?:_runtime|_runtime_api|_fp16|_bf16|_fp8|_pipeline|_awbarrier|/\S+)?(?:\.h|\.hpp)?|cuda\.h|"
    r"device_(?:launch_parameters|functions)\.h|vector_types\.h|math_constants\.h|mma\.h|"
    r"cooperative_groups(?:/\S+)?(?:\.h)?|cub/\S+|thrust/\S+|cublas(?:_v2|Lt)?\.h|cudnn\.h|curand(?:_kernel)?\.h|"
    r"pybind11/(?:pybind11|stl|numpy)\.h|"
    r"c?math(?:\.h)?|cfloat|float\.h|climits|limits\.h|limits|cstdint|stdint\.h|cstddef|stddef\.h|cstring|"
    r"string\.h|cassert|assert\.h|cstdio|stdio\.h|"
    r"vector|array|algorithm|numeric|utility|tuple|type_traits|functional|iostream|sstream|string|map|"
    r"unordered_map|set|unordered_set|memory|initializer_list|iterator|optional|cmath|complex|bitset|deque|"
    r"list|queue|stack|chrono|random|mutex|atomic|stdexcept|exception|iomanip|cstdarg)"
)
KEYWORDS = frozenset("""
if for while do switch case default break continue return goto else sizeof alignof alignas decltype typeid
static_cast reinterpret_cast const_cast dynamic_cast new delete this const constexpr consteval constinit static
inline extern volatile mutable template typename class struct union enum namespace using typedef public private
protected virtual override final friend operator explicit noexcept throw try catch auto void bool char short int
long float double signed unsigned wchar_t char8_t char16_t char32_t true false nullptr register static_assert
thread_local and or not xor bitand bitor compl
""".split())
ALLOWED_NAMES = frozenset("""
__global__ __device__ __host__ __shared__ __constant__ __managed__ __restrict__ __restrict __forceinline__
__noinline__ __inline__ __launch_bounds__ __align__ __grid_constant__ __CUDA_ARCH__ __CUDACC__ __VA_ARGS__
__FILE__ __LINE__ __func__ __FUNCTION__
threadIdx blockIdx blockDim gridDim warpSize
size_t ptrdiff_t int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t intptr_t uintptr_t uint
half half2 __half __half2 __nv_bfloat16 __nv_bfloat162 nv_bfloat16 nv_bfloat162 __nv_fp8_e4m3 __nv_fp8_e5m2
dim3 cudaError_t cudaStream_t cudaEvent_t cudaDeviceProp cudaSuccess cudaMemcpyHostToDevice cudaMemcpyDeviceToHost
cudaMemcpyDeviceToDevice cudaMemcpyDefault cudaGetLastError cudaPeekAtLastError cudaGetErrorString
cudaDeviceSynchronize cudaStreamSynchronize cudaMemcpy cudaMemcpyAsync cudaMemset cudaMemsetAsync cudaMalloc
cudaFree cudaMallocAsync cudaFreeAsync cudaGetDevice cudaGetDeviceProperties cudaDeviceGetAttribute
cudaFuncSetAttribute cudaFuncAttributeMaxDynamicSharedMemorySize cudaFuncGetAttributes cudaFuncAttributes
cudaOccupancyMaxActiveBlocksPerMultiprocessor cudaOccupancyMaxPotentialBlockSize cudaLaunchKernel
cudaLaunchCooperativeKernel cudaDevAttrMultiProcessorCount cudaDevAttrMaxSharedMemoryPerBlockOptin
cudaMemcpyToSymbol cudaMemcpyToSymbolAsync cudaMemcpyFromSymbol cudaEventCreate cudaEventRecord
cudaEventSynchronize cudaEventElapsedTime cudaEventDestroy cudaFuncSetCacheConfig cudaFuncCachePreferShared
cudaFuncCachePreferL1 cudaSharedMemBankSizeEightByte cudaDeviceSetSharedMemConfig cudaErrorInvalidValue
cudaStreamWaitEvent cudaMallocManaged cudaMemGetInfo cudaTextureObject_t cudaChannelFormatDesc
cudaCreateChannelDesc cudaResourceDesc cudaTextureDesc cudaCreateTextureObject cudaDestroyTextureObject
cudaResourceTypeLinear cudaReadModeElementType cudaAddressModeClamp cudaFilterModePoint
cublasHandle_t cublasStatus_t CUBLAS_STATUS_SUCCESS CUBLAS_OP_N CUBLAS_OP_T
NAN INFINITY HUGE_VALF HUGE_VAL FLT_MAX FLT_MIN FLT_EPSILON DBL_MAX DBL_MIN DBL_EPSILON INT_MAX INT_MIN UINT_MAX
LLONG_MAX LLONG_MIN INT64_MAX INT64_MIN INT32_MAX INT32_MIN UINT32_MAX CHAR_BIT CUDART_INF_F CUDART_NAN_F
CUDART_PI_F CUDART_INF CUDART_NAN M_PI M_PI_2 M_PI_4 M_E M_SQRT2 M_SQRT1_2 M_2_SQRTPI M_LN2 M_LOG2E M_1_PI NULL
printf fprintf snprintf sprintf puts stderr stdout memcpy memset memmove memcmp malloc calloc realloc free
strlen strcmp strncmp exit abort assert clock clock64 __trap __nanosleep
TORCH_CHECK TORCH_CHECK_EQ TORCH_CHECK_NE TORCH_CHECK_LT TORCH_CHECK_LE TORCH_CHECK_GT TORCH_CHECK_GE
TORCH_CHECK_VALUE TORCH_CHECK_INDEX TORCH_CHECK_TYPE TORCH_CHECK_NOT_IMPLEMENTED TORCH_INTERNAL_ASSERT
TORCH_WARN TORCH_WARN_ONCE TORCH_EXTENSION_NAME AT_ERROR AT_ASSERT AT_ASSERTM AT_CUDA_CHECK
PYBIND11_MODULE scalar_t index_t acc_t opmath_t
vector array pair tuple numeric_limits string to_string move forward swap min max sort accumulate fill
make_pair make_tuple get begin end cout cerr endl abs maybe_unused likely unlikely nodiscard fallthrough
Tensor TensorOptions IntArrayRef ScalarType Scalar Half BFloat16 kFloat kFloat32 kFloat16 kHalf kBFloat16 kDouble
kFloat64 kInt kInt32 kInt64 kLong kBool kByte kChar kShort kCUDA kCPU empty empty_like zeros zeros_like ones
ones_like full full_like device_of getCurrentCUDAStream RestrictPtrTraits DefaultPtrTraits EXIT_FAILURE EXIT_SUCCESS
__attribute__ aligned packed unused always_inline noinline
""".split())
ALLOWED_PATTERNS = re.compile(
    r"(?:AT_DISPATCH_\w+|AT_PRIVATE_\w+|C10_\w+|CUDA_KERNEL_LOOP\w*|"
    # CUDA intrinsics: sync and warp ops, loads and stores, bit ops, conversions, half and fast math
    r"__(?:syncthreads\w*|syncwarp|threadfence\w*|shfl\w*|ballot_sync|any_sync|all_sync|uni_sync|activemask|"
    r"match_\w+|reduce_\w+_sync|ld(?:g|cg|ca|cs|lu|cv)|st(?:cg|cs|wb|wt)|popc\w*|clz\w*|ffs\w*|brev\w*|byte_perm|"
    r"funnelshift_\w+|u?mul24|u?mulhi|u?mul64hi|u?sad|u?r?hadd|dp[24]a\w*|pipeline_\w+|cvta_\w+|isShared|isGlobal|"
    r"h2\w*|"
    r"(?:float|half|bfloat16|double|int|uint|ll|ull|short|ushort|float2|half2|bfloat162|floats2|halves2|lows2|"
    r"highs2|low2|high2|high2half|low2half|nv_cvt)\w*|"
    r"h(?:add|sub|mul|div|fma|neg|abs|max|min|eq|ne|lt|le|gt|ge|equ|neu|ltu|leu|gtu|geu|isnan|isinf)\w*|"
    r"f(?:add|sub|mul|div|rcp|sqrt|rsqrt|ma|maf)_r[nzud]|fmaf_ieee_r[nzud]|fdividef|"
    r"d(?:add|sub|mul|div|rcp|sqrt)_r[nzud]|fma_r[nzud]|saturatef|"
    r"(?:exp|exp10|log|log2|log10|sin|cos|tan|pow|sincos|tanh)f|"
    r"builtin_(?:expect|assume|assume_aligned|unreachable|popcount\w*|clz\w*|ctz\w*|prefetch))|"
    r"h(?:exp|exp2|exp10|log|log2|log10|sqrt|rsqrt|rcp|sin|cos|floor|ceil|trunc|rint|tanh)2?|"
    r"atomic(?:Add|Sub|Exch|Min|Max|Inc|Dec|CAS|And|Or|Xor)(?:_block|_system)?|"
    r"make_(?:u?char|u?short|u?int|u?long|u?longlong|float|double|half|bfloat16|cuComplex|cuDoubleComplex)[1-4]?|"
    r"(?:u?char|u?short|u?int|u?long|u?longlong|float|double|half|bfloat16)[1-4]|"
    # the C math library, float and long double forms too
    r"(?:sqrt|rsqrt|cbrt|rcbrt|exp|exp2|exp10|expm1|log|log2|log10|log1p|pow|sin|cos|tan|asin|acos|atan|atan2|"
    r"sinh|cosh|tanh|asinh|acosh|atanh|erf|erfc|erfinv|erfcinv|erfcx|lgamma|tgamma|floor|ceil|round|rint|trunc|"
    r"lround|llround|lrint|llrint|nearbyint|fmod|remainder|remquo|frexp|ldexp|modf|fabs|fmax|fmin|fma|fdim|hypot|"
    r"norm3d|norm4d|rhypot|copysign|signbit|isnan|isinf|isfinite|nan|normcdf|normcdfinv|sincos|sincospi|sinpi|"
    r"cospi|logb|ilogb|scalbn|scalbln|nextafter|j0|j1|y0|y1|cyl_bessel_i0|cyl_bessel_i1)[fl]?|"
    r"u?l?l?(?:min|max|abs)|labs|llabs|"
    # the CUDA runtime (cudaStreamCreate and the rest of DENIED_CUDA refused below), cuBLAS, cuDNN, cuRAND
    r"cuda[A-Z]\w*|CUDA_R_\w+|CUBLAS_\w+|cublas\w+|cudnn\w+|CUDNN_\w+|curand\w*|CURAND_\w+|"
    r"wmma|nvcuda|fragment|matrix_[ab]|accumulator|row_major|col_major|mem_row_major|mem_col_major|"
    r"load_matrix_sync|store_matrix_sync|mma_sync|fill_fragment)"
)
# Side streams (the timer would not see their work), other processes' memory, host callbacks (a thread of the
# driver's running the candidate's code), the device reset, the driver's own entry points.
DENIED_CUDA = re.compile(r"cuda(?:StreamCreate\w*|Ipc\w*|LaunchHostFunc|StreamAddCallback|DeviceReset|ThreadExit|"
                         r"GetDriverEntryPoint\w*|GetExportTable|GraphAddHostNode\w*)")
ALLOWED_ROOTS = frozenset({"std", "torch", "at", "c10", "cub", "thrust", "nvcuda", "wmma", "cooperative_groups",
                           "cuda", "py", "pybind11"})
# Members of those namespaces (at any depth) that reach past a kernel's business.
DENIED_MEMBERS = frozenset({
    "system", "thread", "jthread", "async", "this_thread", "fstream", "ifstream", "ofstream", "filebuf",
    "filesystem", "getenv", "setenv", "putenv", "quick_exit", "at_quick_exit", "atexit", "remove", "rename",
    "tmpnam", "tmpfile", "fopen", "freopen", "FILE", "signal", "raise", "packaged_task", "cin",
    "jit", "load", "save", "from_file", "pickle_load", "pickle_save", "serialize", "launch", "Library",
    "RegisterOperators", "Dispatcher", "python", "impl", "utils", "get_env", "set_env", "ThreadPool",
    "TaskThreadPool", "PyInterpreter", "set_num_threads", "set_num_interop_threads", "Module", "compile",
})
PY_ALLOWED = frozenset({"arg", "arg_v", "module", "module_", "call_guard", "gil_scoped_release",
                        "return_value_policy", "overload_cast", "kw_only", "pos_only", "reference_internal", "move",
                        "copy", "reference", "automatic", "take_ownership"})
DENIED_MEMBER_CALLS = frozenset({"attr", "import", "ptr", "eval", "exec", "import_", "def_submodule"})
# pybind11's ways into the interpreter, refused under whatever root they are reached by (an alias, a macro's
# parameter): none is a member of a namespace kernels need.
PY_REACHING = frozenset({"import", "getattr", "hasattr", "setattr", "delattr", "globals", "eval", "exec", "eval_file",
                         "exec_file", "reinterpret_borrow", "reinterpret_steal", "module_", "builtins", "capsule",
                         "cpp_function", "object", "handle"})
# libc names an own declaration may not take: its own `write(float*)` leaves libc's `write(int, ...)` a call away.
LIBC_NAMES = frozenset("""
read write pread pwrite readv writev open openat close creat dup dup2 dup3 fcntl ioctl lseek mmap munmap mprotect
fork vfork clone execve execv execvp system popen pclose kill sigaction pipe socket connect
accept recv sendto recvfrom unlink unlinkat rmdir mkdir mkdirat chmod fchmod chown rename
symlink readlink readlinkat fstat lstat truncate ftruncate fallocate posix_fallocate mkstemp mkstemps
mkdtemp tmpfile fopen fdopen freopen fread fwrite fclose fflush getenv setenv putenv unsetenv dlopen dlsym
syscall ptrace prctl sleep usleep nanosleep setuid setgid chdir chroot getpid getppid waitpid
""".split())
_NAME = re.compile(r"[A-Za-z_]\w*")
_TOKEN = re.compile(r"(?P<id>[A-Za-z_]\w*)|(?P<num>\.?\d[\w.]*(?:[eEpP][+-]\d+\w*)?)|(?P<op>::|->|<<<|>>>|[^\s\w])")
_DECLARED_AFTER = frozenset({"=", ";", ",", "[", "{", ")", ":", ">", "__attribute__"})  # `T name` then one of these declares name


def _blank_literals(text: str) -> str:
    """Comments out; string and char literals emptied (a TORCH_CHECK message is not code)."""
    text = text.replace("\\\r\n", "").replace("\\\n", "")
    text = re.sub(r'R"([^(\s]{0,16})\((?:.|\n)*?\)\1"', '""', text)
    pattern = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
    return pattern.sub(lambda m: " " if m.group(0).startswith("/") else m.group(0)[0] * 2, text)


def _matching(tokens: list[str], start: int, opening: str, closing: str) -> int:
    """Index of the token closing the bracket at `start` (len(tokens) when it never closes)."""
    depth = 0
    for index in range(start, len(tokens)):
        if tokens[index] == opening:
            depth += 1
        elif tokens[index] == closing:
            depth -= 1
            if depth == 0:
                return index
    return len(tokens)


class _Source:
    """One extension's C++ (all its source strings together), tokenised, with the names it makes its own."""

    def __init__(self, text: str):
        self.directives: list[str] = []
        code_lines = []
        for line in _blank_literals(text).split("\n"):
            stripped = line.strip()
            if stripped.startswith("#"):
                self.directives.append(stripped)
                body = re.match(r"#\s*define\s+(\w+)(\(([^)]*)\))?(.*)", stripped)
                code_lines.append(body.group(4) if body else "")  # a macro's body is code; other directives aren't
            else:
                code_lines.append(line)
        self.tokens = [m.group(0) for m in _TOKEN.finditer("\n".join(code_lines)) if not m.group("num")]
        self.own = self._own_names()
        self.aliases = self._aliases()

    def _aliases(self) -> dict[str, str]:
        """Names that stand for a namespace: `namespace cg = cooperative_groups;`, `#define P pybind11`; each to
        the first name of what it stands for (its root), so a qualified name is judged by what it reaches."""
        aliases: dict[str, str] = {}
        for directive in self.directives:
            found = re.match(r"#\s*define\s+(\w+)\s+(?:::\s*)?(\w+)\s*(?:::.*)?$", directive)
            if found:
                aliases[found.group(1)] = found.group(2)
        tokens = self.tokens
        for i, token in enumerate(tokens[:-3]):
            if token == "namespace" and _NAME.fullmatch(tokens[i + 1]) and tokens[i + 2] == "=":
                j = i + 3 + (tokens[i + 3] == "::")
                if j < len(tokens) and _NAME.fullmatch(tokens[j]):
                    aliases[tokens[i + 1]] = tokens[j]
        for _ in range(len(aliases)):  # an alias of an alias
            aliases = {name: aliases.get(root, root) for name, root in aliases.items()}
        return aliases

    def _own_names(self) -> set[str]:
        own: set[str] = set()
        for directive in self.directives:
            found = re.match(r"#\s*define\s+(\w+)(?:\(([^)]*)\))?", directive)
            if found:
                own.add(found.group(1))
                own.update(re.findall(r"\w+", found.group(2) or ""))
        tokens = self.tokens
        for i, token in enumerate(tokens):  # types first: `Own obj(x)` is then a variable made by its constructor
            after = tokens[i + 1] if i + 1 < len(tokens) else ""
            if token in ("struct", "class", "union", "enum", "typename", "namespace") and _NAME.fullmatch(after):
                j = i + 1
                while j + 1 < len(tokens) and tokens[j] in ("class", "__align__", "alignas", "__attribute__"):
                    j = _matching(tokens, j + 1, "(", ")") + 1 if tokens[j + 1] == "(" else j + 1
                own.add(tokens[j] if j < len(tokens) else after)
                if token == "enum":
                    own.update(self._enum_values(i))
            elif token == "}" and _NAME.fullmatch(after) and i + 2 < len(tokens) and tokens[i + 2] in (";", ",", "[", "="):
                own.add(after)  # struct { ... } name;
            elif token == "auto" and after == "[":  # auto [a, b] = pair;
                own.update(name for name in tokens[i + 2:_matching(tokens, i + 1, "[", "]")] if _NAME.fullmatch(name))
            elif token == "using" and i + 2 < len(tokens) and tokens[i + 2] == "=":
                own.add(after)
            elif token == "typedef":
                end = next((j for j in range(i, len(tokens)) if tokens[j] == ";"), len(tokens))
                own.add(tokens[end - 1])
            elif token == "PYBIND11_MODULE" and i + 4 < len(tokens):
                own.add(tokens[i + 4])  # PYBIND11_MODULE(name, m): m
        self.types = set(own)
        for i in range(len(tokens) - 1):
            name = tokens[i + 1]
            if not _NAME.fullmatch(name) or name in KEYWORDS or not self._declares(i):
                continue
            following = tokens[i + 2] if i + 2 < len(tokens) else ";"
            if following == "(":
                if self._has_body(i + 2) or self._constructed(i):
                    own.add(name)
                    own.update(self._more_declarators(i + 2) if not self._has_body(i + 2) else ())
            elif following in _DECLARED_AFTER:
                own.add(name)
                own.update(self._more_declarators(i + 2))
        return own

    def _more_declarators(self, start: int) -> set[str]:
        """The other names of one declaration: `b` and `c` in `float a = 0, b, *c;` or `dim3 g(n), b(32)`."""
        names, depth, tokens = set(), 0, self.tokens
        for j in range(start, len(tokens)):
            token = tokens[j]
            if token in ("(", "[", "{"):
                depth += 1
            elif token in (")", "]", "}"):
                depth -= 1
                if depth < 0:
                    break
            elif depth == 0 and token == ";":
                break
            elif depth == 0 and token == ",":
                k = j + 1
                while k < len(tokens) and tokens[k] in ("*", "&", "&&"):
                    k += 1
                if k + 1 < len(tokens) and _NAME.fullmatch(tokens[k]) and tokens[k + 1] in ("(", "=", ";", ",", "[", "{"):
                    names.add(tokens[k])
        return names

    def _declares(self, i: int) -> bool:
        """Whether tokens[i] can end a type that the next name is declared with: a type name or keyword,
        a `*`, `&` or `>` after one, or a `__restrict__`-like qualifier."""
        token = self.tokens[i]
        if token in ("return", "case", "goto", "throw", "new", "delete", "else", "do", "sizeof", "using",
                     "namespace", "typedef", "operator"):
            return False
        if re.fullmatch(r"[A-Za-z_]\w*", token):
            return True
        if token == ")":  # __global__ void __launch_bounds__(256) kernel(...)
            depth, j = 0, i
            while j > 0:
                depth += {")": 1, "(": -1}.get(self.tokens[j], 0)
                if depth == 0:
                    return self.tokens[j - 1] in ("__launch_bounds__", "__align__", "alignas")
                j -= 1
            return False
        if token in ("*", "&", "&&", ">"):
            j = i
            while j > 0 and self.tokens[j] in ("*", "&", "&&", "const"):
                j -= 1
            return j != i and (re.fullmatch(r"[A-Za-z_]\w*", self.tokens[j]) is not None or self.tokens[j] == ">") \
                or token == ">"
        return False

    def _has_body(self, open_paren: int) -> bool:
        close = _matching(self.tokens, open_paren, "(", ")")
        j = close + 1
        while j < len(self.tokens) and self.tokens[j] in ("const", "noexcept", "override", "final", "mutable",
                                                            "volatile", "&", "&&"):
            j += 1
        return j < len(self.tokens) and self.tokens[j] in ("{", ":", "->")

    def _constructed(self, i: int) -> bool:
        """`dim3 grid(n)`, `c10::cuda::CUDAGuard guard(d)`, `std::vector<int64_t> sizes(n)`, `Own obj(x)`: a
        variable made by a constructor (a type of its own, dim3, or one qualified by an allowed namespace)."""
        token = self.tokens[i]
        return token == "dim3" or token in self.types or (i > 0 and self.tokens[i - 1] == "::") \
            or (token == ">" and self._template_type_before(i))

    def _template_type_before(self, i: int) -> bool:
        depth, j = 0, i
        while j >= 0:
            if self.tokens[j] == ">":
                depth += 1
            elif self.tokens[j] == "<":
                depth -= 1
                if depth == 0:
                    return j > 0 and (self.tokens[j - 1] in self.types or self.tokens[j - 1] in (
                        "vector", "array", "unique_ptr", "shared_ptr", "tuple", "pair", "optional", "complex")
                        or (j > 1 and self.tokens[j - 2] == "::"))
            elif self.tokens[j] in (";", "{", "}", "(", ")"):
                return False
            j -= 1
        return False

    def _enum_values(self, i: int) -> set[str]:
        start = next((j for j in range(i, min(i + 8, len(self.tokens))) if self.tokens[j] == "{"), None)
        if start is None:
            return set()
        end = _matching(self.tokens, start, "{", "}")
        body = self.tokens[start + 1:end]
        return {name for k, name in enumerate(body) if (k == 0 or body[k - 1] == ",") and re.fullmatch(r"\w+", name)}


def _allowed(name: str) -> bool:
    return (name in KEYWORDS or name in ALLOWED_NAMES or ALLOWED_PATTERNS.fullmatch(name) is not None) \
        and DENIED_CUDA.fullmatch(name) is None


def first_unknown(text: str) -> str | None:
    """Why this extension source leaves a kernel's business (one line), or None: an include not on the
    list, a name that is neither its own nor allowed, a denied member of an allowed namespace."""
    source = _Source(text)
    for directive in source.directives:
        include = re.match(r"#\s*include\s*[<\"]\s*([^>\"]+?)\s*[>\"]", directive)
        if include and not ALLOWED_HEADERS.fullmatch(include.group(1)):
            return f"#include <{include.group(1)}> is not a header kernels need"
        if not include and not re.match(r"#\s*(?:define|undef|if|ifdef|ifndef|elif|else|endif|pragma|error)\b",
                                        directive):
            return f"the directive `{directive[:40]}` is not one kernels need"
    own_libc = sorted(source.own & LIBC_NAMES)
    if own_libc:
        return f"`{own_libc[0]}` is declared here under a C library function's name"
    tokens = source.tokens
    for i, token in enumerate(tokens):
        if not _NAME.fullmatch(token):
            continue
        before = tokens[i - 1] if i else ""
        if before in (".", "->"):
            if token in DENIED_MEMBER_CALLS:
                return f"`.{token}` reaches the Python interpreter"
            continue
        if before == "::":
            root = source.aliases.get(_qualified_root(tokens, i), _qualified_root(tokens, i))
            if i < 2 or not (_NAME.fullmatch(tokens[i - 2]) or tokens[i - 2] == ">"):
                return f"`::{token}` names the global namespace (the C library), not something kernels need"
            if token in PY_REACHING and root not in ("py", "pybind11"):
                return f"`{root}::{token}` reaches the Python interpreter"
            if root in ("py", "pybind11"):
                if token not in PY_ALLOWED:
                    return f"`{root}::{token}` reaches the Python interpreter (a module definition needs only m.def)"
            elif token in DENIED_MEMBERS or DENIED_CUDA.fullmatch(token):
                return f"`{root}::{token}` reaches past a kernel's business (threads, files, the environment, " \
                       "TorchScript or operator registration)"
            continue
        after = tokens[i + 1] if i + 1 < len(tokens) else ""
        if after == "::" and token not in ALLOWED_ROOTS and token not in source.own:
            return f"`{token}::` is not a namespace kernels need"
        if after != "::" and token not in source.own and token not in ALLOWED_ROOTS and not _allowed(token):
            return f"`{token}` is not something a kernel or its host wrapper needs"
    return None


def _qualified_root(tokens: list[str], i: int) -> str:
    """The first name of the `a::b::c` chain that tokens[i] ends ("" for `::read`)."""
    j = i
    while j >= 2 and tokens[j - 1] == "::" and re.fullmatch(r"\w+", tokens[j - 2]):
        j -= 2
    return tokens[j] if j != i else ""
