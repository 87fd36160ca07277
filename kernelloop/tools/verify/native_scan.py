"""The C++/CUDA a load_inline extension may hold: an allowlist of what kernels and their host wrappers need.

A deny list of system calls missed what it did not name (issue 35: pybind11's `py::eval` ran Python
that rewrote the claims the parent reads; `read`, `write`, `dup`, `fcntl`, `clone`, `mkstemp`,
`at::launch` ...). So every identifier of an extension's source must be one of:

- the source's own where it is used (issue 36: one flat set of own names let an unused function's
  parameter named `PyFrame_GetBuiltins` pass every call of the C API's): a macro's name from its
  #define to its #undef, a type it declares (struct, class, union, enum and its values, typedef,
  using, namespace alias) and a function it defines with a body in their scope (a namespace's or an
  extern "C" block's is the one around it), a variable from its declaration to its block's end, a
  parameter in its function's body, a template parameter in its template; a macro's parameters
  only in its body. A macro's body is judged where it is expanded;
  a declaration under an #if branch counts only in that branch, and a macro's body and every #if
  branch must pair its brackets (else the blocks the compiler sees are not the scan's);
- a name a kernel or its host wrapper needs (`ALLOWED_NAMES`, `ALLOWED_PATTERNS`): C++ keywords and
  built-in types, CUDA's qualifiers, built-in variables, intrinsics, atomics and runtime API, the
  C math library, a few libc helpers with no reach outside the process (printf, memcpy, malloc),
  torch's macros (TORCH_CHECK, AT_DISPATCH_*, C10_*), PYBIND11_MODULE and TORCH_EXTENSION_NAME;
- a qualified name under an allowed namespace (`ALLOWED_ROOTS`: std, torch, at, c10, cub, thrust,
  nvcuda, cooperative_groups, cuda), minus what reaches outside (`DENIED_MEMBERS`: threads, files,
  the environment, TorchScript, operator registration, at::launch; `DENIED_MEMBER_PARTS`: any name
  holding fstream, filebuf, from_file ...), or under pybind11 (`py::`)
  only what a module definition needs (`PY_ALLOWED`: arg, module_, ...; never eval, exec, import,
  globals, object).

A function the source declares without a body is not its own (a prototype of libc's `read` is how
it reaches the C library without a header), nor may it give a name libc also has (`LIBC_NAMES`) to a
function, type, macro or name at namespace scope: an own `write(float*)` overload leaves libc's
`write(int, ...)` a call away. The Python C API (`PY_API`: Py*, _Py*) is refused as a name even
where the source declares it. Member calls (`x.size(0)`) are left to the type they are called on,
except pybind11's `.attr` and `.import` and `.ptr`. Headers must be on `ALLOWED_HEADERS`, off
`DENIED_HEADERS`, and in normal form.

This is a lint, not the boundary (the sandbox is): text the module builds at run time is not seen.
"""

from __future__ import annotations

import posixpath
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
# Headers under those trees that bring what torch/extension.h does not and kernels never need: <fstream>
# (tunable's results files), <filesystem>, signal handlers, dlopen and dlsym (at::DynamicLibrary), files mapped
# into memory (at::MapAllocator). A path must be in normal form: `..`, `.` or `//` would step out of a tree
# (<ATen/../../../usr/include/c++/12/fstream>) or past this list.
# And the headers of torch's kernels by backend, past the dispatcher (ATen/CPUFunctions.h's at::cpu::_softmax,
# CUDAFunctions.h, ops/*_cpu_dispatch.h, ATen/native/): torch's work with no op recorded (review39).
DENIED_HEADERS = re.compile(r"ATen/(?:cuda|hip)/tunable/\S+|ATen/(?:DynamicLibrary|MapAllocator)\.h|"
                            r"c10/util/(?:FileSystem|signal_handler)\.h|"
                            r"ATen/(?!Functions\.h)\w+Functions(?:_inl)?\.h|ATen/ops/\w+_(?:dispatch|native)\.h|"
                            r"ATen/native/\S+")
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
    "wcin", "scanf", "vscanf", "getchar", "gets", "intraop_launch", "launch_no_thread_state", "DynamicLibrary",
    # torch's kernels called past the dispatcher, which the op records (a dispatch mode) never see: torch's
    # work passed off as an extension's own (review39_forward_at_cpu_softmax; at::native:: comes with
    # torch/extension.h itself)
    "native", "cpu", "meta", "compositeexplicitautograd", "compositeimplicitautograd",
    "compositeexplicitautogradnonfunctional", "compositeimplicitautogradnestedtensor",
})
# Parts of a member's name that reach files however the rest is spelled: the stream and buffer templates
# (basic_ifstream, wofstream, basic_filebuf, wfilebuf, std::__basic_file, __gnu_cxx::stdio_filebuf), from_file's
# out variants (at::from_file_out reads a file into a tensor, or with shared=true creates and writes one), the
# file mapping allocators.
DENIED_MEMBER_PARTS = re.compile(r"fstream|filebuf|basic_file|from_file|MapAllocator")
PY_ALLOWED = frozenset({"arg", "arg_v", "module", "module_", "call_guard", "gil_scoped_release",
                        "return_value_policy", "overload_cast", "kw_only", "pos_only", "reference_internal", "move",
                        "copy", "reference", "automatic", "take_ownership"})
DENIED_MEMBER_CALLS = frozenset({"attr", "import", "ptr", "eval", "exec", "import_", "def_submodule"})
# pybind11's ways into the interpreter, refused under whatever root they are reached by (an alias, a macro's
# parameter): none is a member of a namespace kernels need.
PY_REACHING = frozenset({"import", "getattr", "hasattr", "setattr", "delattr", "globals", "eval", "exec", "eval_file",
                         "exec_file", "reinterpret_borrow", "reinterpret_steal", "module_", "builtins", "capsule",
                         "cpp_function", "object", "handle"})
# libc names an own declaration that can stand beside libc's may not take (a function, a type, a name at namespace
# scope, a macro): its own `write(float*)` leaves libc's `write(int, ...)` a call away. A local or a parameter of
# that name hides libc's only in its scope, where it is what the name means. The 64-bit and unlocked forms too:
# torch/extension.h brings in Python.h, and with it stdio.h, unistd.h, fcntl.h and the rest of libc.
LIBC_NAMES = frozenset("""
read write pread pwrite readv writev open openat close creat dup dup2 dup3 fcntl ioctl lseek mmap munmap mprotect
fork vfork clone execve execv execvp system popen pclose kill sigaction pipe socket connect
accept recv sendto recvfrom unlink unlinkat rmdir mkdir mkdirat chmod fchmod chown rename
symlink readlink readlinkat fstat lstat truncate ftruncate fallocate posix_fallocate mkstemp mkstemps
mkdtemp tmpfile fopen fdopen freopen fread fwrite fclose fflush getenv setenv putenv unsetenv dlopen dlsym
syscall ptrace prctl sleep usleep nanosleep setuid setgid chdir chroot getpid getppid waitpid
fopen64 freopen64 open64 openat64 openat2 creat64 tmpfile64 lseek64 llseek pread64 pwrite64 preadv pwritev preadv2
pwritev2 mmap64 mremap truncate64 ftruncate64 fstat64 lstat64 stat stat64 fstatat fstatat64 newfstatat statx statfs
fstatfs fallocate64 posix_fallocate64 mkstemp64 mkostemp mkostemp64 mkostemps mkstemps64 mktemp tmpnam tmpnam_r
tempnam
fgets fputs fgetc fputc getc putc getc_unlocked putc_unlocked fgetc_unlocked fputc_unlocked fgets_unlocked
fputs_unlocked fread_unlocked fwrite_unlocked getchar putchar gets getline getdelim fscanf vfscanf scanf vscanf
fwscanf fgetws fputws fprintf_unlocked vfprintf vdprintf dprintf setvbuf setbuf setbuffer setlinebuf fseek fseeko
fseeko64 ftell ftello ftello64 rewind fgetpos fsetpos fgetpos64 fsetpos64 fileno fmemopen open_memstream remove
renameat renameat2 link linkat symlinkat access faccessat faccessat2 euidaccess eaccess opendir fdopendir readdir
readdir64 readdir_r scandir scandir64 closedir rewinddir seekdir telldir getcwd getwd get_current_dir_name fchdir
realpath canonicalize_file_name nftw ftw glob
execl execle execlp execvpe fexecve execveat posix_spawn posix_spawnp wait wait3 wait4 waitid daemon setsid setpgid
signal raise sigqueue tgkill tkill killpg alarm
socketpair bind listen accept4 send recvmsg sendmsg sendmmsg recvmmsg getaddrinfo gethostbyname shutdown setsockopt
secure_getenv clearenv environ __environ
dlmopen dlvsym dlclose dlerror dladdr dlinfo
process_vm_readv process_vm_writev memfd_create shm_open shm_unlink madvise
sendfile sendfile64 splice tee vmsplice copy_file_range select pselect poll ppoll epoll_create epoll_create1
epoll_ctl epoll_wait inotify_init inotify_init1 inotify_add_watch eventfd timerfd_create signalfd
pthread_create pthread_kill pthread_detach pthread_atfork thrd_create clone3
setrlimit prlimit sched_setaffinity seccomp mount umount umount2 pivot_root mkfifo mkfifoat mknod mknodat utime
utimes futimes utimensat futimens flock lockf fsync fdatasync sync syncfs
atexit on_exit at_quick_exit quick_exit getpwnam getpwuid fchown lchown fchownat fchmodat setreuid setresuid
seteuid setegid setregid setresgid
""".split())
# The Python C API (torch/extension.h includes Python.h): refused even where the source declares the name.
PY_API = re.compile(r"_?Py[A-Z_]\w*")
_NAME = re.compile(r"[A-Za-z_]\w*")
_TOKEN = re.compile(r"(?P<id>[A-Za-z_]\w*)|(?P<num>\.?\d[\w.]*(?:[eEpP][+-]\d+\w*)?)|(?P<op>::|->|<<<|>>>|[^\s\w])")
_NOT_TYPES = frozenset("""
return case goto throw new delete else do sizeof using namespace typedef operator not and or xor bitand bitor compl
not_eq and_eq or_eq xor_eq true false nullptr this co_await co_yield co_return requires alignof typeid
""".split())  # words before a name that never make it a declaration
_DECLARED_AFTER = frozenset({"=", ";", ",", "[", "{", ")", ":", ">", "__attribute__"})  # `T name` then one of these declares name


def _blank_literals(text: str) -> str:
    """Comments out; string and char literals emptied (a TORCH_CHECK message is not code)."""
    text = text.replace("\\\r\n", "").replace("\\\n", "")
    text = re.sub(r'R"([^(\s]{0,16})\((?:.|\n)*?\)\1"', '""', text)
    pattern = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
    return pattern.sub(lambda m: " " if m.group(0).startswith("/") else m.group(0)[0] * 2, text)


def _balanced(tokens: list[str]) -> bool:
    """Whether every bracket in tokens is closed in order, none closed that was not opened."""
    stack: list[str] = []
    for token in tokens:
        if token in ("(", "[", "{"):
            stack.append({"(": ")", "[": "]", "{": "}"}[token])
        elif token in (")", "]", "}") and (not stack or stack.pop() != token):
            return False
    return not stack


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


class _Macro:
    """One #define: its name, parameters, the token range of its body (after the code) and where it is
    defined and #undef'd in the code (token indices), under which #if branches."""

    def __init__(self, name: str, params: frozenset[str], at: int, context: tuple):
        self.name, self.params, self.at, self.context = name, params, at, context
        self.until: int | None = None  # the #undef
        self.start = self.end = 0


class _Source:
    """One extension's C++ (all its source strings together), tokenised, with the names it declares and
    where each is in scope.

    The code's tokens come first (`code_end` of them), then each macro's body (after a `;`): a body is
    judged where the macro is expanded, not where it is defined. Scopes are token ranges: a parameter's
    is its function's (or lambda's, or for/if/catch's) body, a local's runs from its declaration to
    its block's end, a member's is its class, a template parameter's its template; a declaration
    under an #if branch counts only inside that branch, a macro only from its #define to its #undef."""

    def __init__(self, text: str):
        self.directives: list[str] = []
        self.tokens: list[str] = []
        self.macros: list[_Macro] = []
        self.branches: list[tuple[int, int]] = []  # each #if branch's token range, to check it is balanced
        self.conditionals_unbalanced = False
        context: list[tuple[int, int]] = []  # (#if group, branch) stack
        contexts: list[tuple] = []  # each code token's
        opened: list[int] = []  # the start of each open branch
        guards: list[str] = []  # each open #if's NAME where it is `#ifndef NAME`
        bodies: list[str] = []
        groups = 0
        for line in _blank_literals(text).split("\n"):
            stripped = line.strip()
            if not stripped.startswith("#"):
                found = [m.group(0) for m in _TOKEN.finditer(line) if not m.group("num")]
                self.tokens += found
                contexts += [tuple(context)] * len(found)
                continue
            self.directives.append(stripped)
            here = len(self.tokens)
            define = re.match(r"#\s*define\s+(\w+)(\(([^)]*)\))?(.*)", stripped)
            keyword = re.match(r"#\s*(\w+)", stripped)
            kind = keyword.group(1) if keyword else ""
            if define:
                name = define.group(1)
                # `#ifndef NAME` / `#define NAME`: where the branch is left out, NAME is a macro all the same
                guarded = bool(context) and context[-1][1] == 0 and guards[-1] == name
                self.macros.append(_Macro(name, frozenset(re.findall(r"\w+", define.group(3) or "")), here,
                                          tuple(context[:-1] if guarded else context)))
                bodies.append(define.group(4))
            elif kind == "undef":
                name = stripped.split()[-1] if len(stripped.split()) > 1 else ""
                for macro in self.macros:
                    if macro.name == name and macro.until is None:
                        macro.until = here
            elif kind in ("if", "ifdef", "ifndef"):
                groups += 1
                context.append((groups, 0))
                opened.append(here)
                guard = re.match(r"#\s*(?:ifndef\s+(\w+)|if\s*!\s*defined\s*\(?\s*(\w+)\s*\)?)\s*$", stripped)
                guards.append((guard.group(1) or guard.group(2)) if guard else "")
            elif kind in ("elif", "else", "endif"):
                if not context:
                    self.conditionals_unbalanced = True
                    continue
                self.branches.append((opened.pop(), here))
                group, branch = context.pop()
                if kind == "endif":
                    guards.pop()
                if kind != "endif":
                    context.append((group, branch + 1))
                    opened.append(here)
        self.conditionals_unbalanced |= bool(context)
        self.code_end = len(self.tokens)
        self.contexts = contexts
        for macro, body in zip(self.macros, bodies):
            self.tokens.append(";")
            macro.start = len(self.tokens)
            self.tokens += [m.group(0) for m in _TOKEN.finditer(body) if not m.group("num")]
            macro.end = len(self.tokens)
        self.regions = [(0, self.code_end)] + [(m.start, m.end) for m in self.macros]
        self.close, self.brace_of, self.paren_of = self._brackets()
        self.opening = {close: opening for opening, close in self.close.items()}
        self.templates = self._template_heads()
        self.types: set[str] = set()
        self.variables: set[str] = set()
        first = self._declarations()  # once to learn the variables' names, then again with them known
        self.variables = {name for name, _, what in first if what == "variable"} - self.types
        self.declared: dict[str, list[tuple[int, int, int]]] = {}  # name -> (start, end, declared at)
        self.beside_libc: set[str] = {m.name for m in self.macros}  # names that can stand beside libc's
        for name, at, what in self._declarations():
            start, end = self._scope(at, what)
            self.declared.setdefault(name, []).append((start, end, at))
            if what in ("function", "type") or (start, end) == self._region(at):
                self.beside_libc.add(name)
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

    def _region(self, i: int) -> tuple[int, int]:
        return next(((a, b) for a, b in self.regions if a <= i < b), (i, i + 1))

    def _brackets(self) -> tuple[dict[int, int], list[int], list[int]]:
        """Each opening bracket's closing one (its region's end when it never closes), and for each token
        the `{` and the `(` it is innermost in (-1: none), within its own region."""
        close: dict[int, int] = {}
        brace_of = [-1] * len(self.tokens)
        paren_of = [-1] * len(self.tokens)
        pairs = {"}": "{", ")": "(", "]": "["}
        for start, end in self.regions:
            stack: list[int] = []
            for i in range(start, end):
                braces = [k for k in stack if self.tokens[k] == "{"]
                parens = [k for k in stack if self.tokens[k] == "("]
                brace_of[i] = braces[-1] if braces else -1
                paren_of[i] = parens[-1] if parens else -1
                token = self.tokens[i]
                if token in ("{", "(", "["):
                    stack.append(i)
                elif token in pairs:
                    while stack and self.tokens[stack[-1]] != pairs[token]:
                        close[stack.pop()] = i  # a bracket left open inside this one
                    if stack:
                        close[stack.pop()] = i
            for k in stack:
                close[k] = end
        return close, brace_of, paren_of

    def unbalanced(self) -> str | None:
        """Where brackets do not pair up as the compiler will see them: a macro's body, an #if branch
        (one that is left out would move the code after it into another block than the scan sees)."""
        if self.conditionals_unbalanced:
            return "an #if without its #endif (or the reverse)"
        for macro in self.macros:
            if not _balanced(self.tokens[macro.start:macro.end]):
                return f"the macro `{macro.name}` opens or closes a bracket it does not close or open"
        for start, end in self.branches + [(0, self.code_end)]:
            if not _balanced(self.tokens[start:end]):
                return "an #if branch (or the code) opens or closes a bracket it does not close or open"
        return None

    def _template_heads(self) -> list[tuple[int, int, int]]:
        """(`template`, its closing `>`, the end of the declaration it heads) for each template."""
        heads = []
        for i, token in enumerate(self.tokens):
            if token != "template" or i + 1 >= len(self.tokens) or self.tokens[i + 1] != "<":
                continue
            depth, j = 0, i + 1
            while j < len(self.tokens):
                depth += {"<": 1, ">": -1}.get(self.tokens[j], 0)
                if depth == 0 or self.tokens[j] in (";", "{", "}"):
                    break
                j += 1
            heads.append((i, j, self._declaration_end(j + 1)))
        return heads

    def _declaration_end(self, j: int) -> int:
        """The end of the declaration starting at j: its first `;` outside brackets, or the `}` closing its
        first `{` outside parentheses (a function's or a class's body)."""
        end = self._region(j)[1] if j < len(self.tokens) else len(self.tokens)
        while j < end:
            token = self.tokens[j]
            if token in ("(", "["):
                j = self.close.get(j, end) + 1
                continue
            if token == "{":
                return self.close.get(j, end)
            if token in (";", "}"):
                return j
            j += 1
        return end

    def _block(self, i: int) -> int:
        """The innermost `{` around i that is a scope: a namespace's or an extern "C" block is not."""
        k = self.brace_of[i]
        while k >= 0 and self._transparent(k):
            k = self.brace_of[k]
        return k

    def _transparent(self, k: int) -> bool:
        before = self.tokens[max(0, k - 3):k]
        return bool(before) and (before[-1] == "namespace" or (len(before) > 1 and before[-2] == "namespace")
                                 or before == ["extern", '"', '"'])

    def _class_block(self, k: int) -> bool:
        """Whether the `{` at k opens a struct's, class's or union's body (`struct __align__(16) V {`), not a
        function's (`struct S make() {`): its members are in scope in all of it."""
        j = k - 1
        while j >= 0 and self.tokens[j] not in (";", "{", "}", "="):
            if self.tokens[j] == ")":
                j = self.opening.get(j, 0) - 1
                if j < 0 or self.tokens[j] not in ("__align__", "alignas", "__attribute__", "__declspec"):
                    return False
            elif self.tokens[j] in ("struct", "class", "union"):
                return True
            j -= 1
        return False

    def _scope(self, at: int, kind: str) -> tuple[int, int]:
        """The token range where the name declared at `at` is in scope."""
        for head, closing, end in self.templates:
            if head < at <= closing:
                return head, end
        region = self._region(at)
        block = self._block(at)
        paren = self.paren_of[at]
        if kind == "variable" and paren >= 0 and paren > self.brace_of[at]:
            return paren, self._paren_scope_end(paren)
        if kind == "module":  # PYBIND11_MODULE(name, m) { ... }
            body = self._after_parens(at)
            return at, (self.close.get(body, region[1]) if body is not None else at)
        if block < 0:
            return region
        whole = kind in ("type", "function") or self._class_block(block)
        return (block if whole else at), self.close.get(block, region[1])

    def _after_parens(self, at: int) -> int | None:
        paren = self.paren_of[at]
        j = self.close.get(paren, len(self.tokens)) + 1 if paren >= 0 else at
        return j if j < len(self.tokens) and self.tokens[j] == "{" else None

    def _paren_scope_end(self, paren: int) -> int:
        """A name declared in parentheses: a function's or lambda's parameter lives to its body's end (to the
        `)` where there is no body: a prototype, a function pointer); a for/if/while/switch/catch's to its
        statement's end."""
        tokens, end = self.tokens, self._region(paren)[1]
        closing = self.close.get(paren, end)
        j = closing + 1
        if paren > 0 and tokens[paren - 1] in ("for", "if", "while", "switch", "catch"):
            if j < end and tokens[j] == "{":
                return self.close.get(j, end)
            return self._declaration_end(j)
        while j < end and tokens[j] in ("const", "noexcept", "override", "final", "mutable", "volatile", "&", "&&",
                                        "__device__", "__host__", "__forceinline__", "__attribute__", "throw"):
            j = self.close.get(j + 1, end) + 1 if j + 1 < end and tokens[j + 1] == "(" else j + 1
        if j < end and tokens[j] in ("->", ":"):  # a trailing return type; a constructor's member initialisers
            initialisers = tokens[j] == ":"
            j += 1
            while j < end and tokens[j] != ";":
                if tokens[j] == "{" and not (initialisers and _NAME.fullmatch(tokens[j - 1])):
                    return self.close.get(j, end)  # the body (in the initialisers, `m{x}` is one of them)
                j = self.close.get(j, end) + 1 if tokens[j] in ("(", "[", "{") else j + 1
            return closing
        if j < end and tokens[j] == "{":
            return self.close.get(j, end)
        return closing

    def _declarations(self) -> list[tuple[str, int, str]]:
        """(name, token index, kind) for each name the source declares: a type (struct, class, union, enum
        and its values, typedef, using, namespace, template parameter), a function with a body, a variable
        or parameter, PYBIND11_MODULE's module."""
        found: list[tuple[str, int, str]] = []
        tokens = self.tokens
        for i, token in enumerate(tokens):  # types first: `Own obj(x)` is then a variable made by its constructor
            after = tokens[i + 1] if i + 1 < len(tokens) else ""
            if token in ("struct", "class", "union", "enum", "typename", "namespace") and _NAME.fullmatch(after):
                j = i + 1
                while j + 1 < len(tokens) and tokens[j] in ("class", "__align__", "alignas", "__attribute__"):
                    j = _matching(tokens, j + 1, "(", ")") + 1 if tokens[j + 1] == "(" else j + 1
                j = j if j < len(tokens) else i + 1
                found.append((tokens[j], j, "type"))
                if token == "enum":
                    found += [(name, i, "type") for name in self._enum_values(i)]
            elif token == "}" and _NAME.fullmatch(after) and i + 2 < len(tokens) and tokens[i + 2] in (";", ",", "[", "="):
                found.append((after, i + 1, "variable"))  # struct { ... } name;
            elif token == "auto" and after == "[":  # auto [a, b] = pair;
                found += [(tokens[k], k, "variable") for k in range(i + 2, _matching(tokens, i + 1, "[", "]"))
                          if _NAME.fullmatch(tokens[k])]
            elif token == "using" and i + 2 < len(tokens) and tokens[i + 2] == "=":
                found.append((after, i + 1, "type"))
            elif token == "typedef":
                end = next((j for j in range(i, len(tokens)) if tokens[j] == ";"), len(tokens))
                found.append((tokens[end - 1], end - 1, "type"))
            elif token == "PYBIND11_MODULE" and i + 4 < len(tokens):
                found.append((tokens[i + 4], i + 4, "module"))  # PYBIND11_MODULE(name, m): m
        self.types = {name for name, _, kind in found if kind == "type"}
        for i in range(len(tokens) - 1):
            name = tokens[i + 1]
            if not _NAME.fullmatch(name) or name in KEYWORDS or not self._declares(i):
                continue
            following = tokens[i + 2] if i + 2 < len(tokens) else ";"
            if following == "(":
                if self._has_body(i + 2):
                    found.append((name, i + 1, "function"))
                elif self._constructed(i):
                    found.append((name, i + 1, "variable"))
                    found += [(other, k, "variable") for other, k in self._more_declarators(i + 2)]
            elif following in _DECLARED_AFTER:
                found.append((name, i + 1, "variable"))
                found += [(other, k, "variable") for other, k in self._more_declarators(i + 2)]
        return found

    def in_scope(self, name: str, i: int) -> bool:
        """Whether `name` at token i is one the source declared there (a macro's name is judged in the code,
        where it is expanded)."""
        for start, end, at in self.declared.get(name, ()):
            if start <= i <= end and self._same_branch(at, i):
                return True
        return i < self.code_end and any(
            m.name == name and m.at <= i < (m.until if m.until is not None else self.code_end)
            and self.contexts[i][:len(m.context)] == m.context for m in self.macros)

    def _same_branch(self, declared: int, i: int) -> bool:
        """A declaration under an #if branch counts only in that branch (it may be left out)."""
        if declared >= self.code_end or i >= self.code_end:
            return True  # within one macro's body; code's #if branches end where a body starts
        outer = self.contexts[declared] if declared < len(self.contexts) else ()
        inner = self.contexts[i] if i < len(self.contexts) else ()
        return inner[:len(outer)] == outer

    def _more_declarators(self, start: int) -> list[tuple[str, int]]:
        """The other names of one declaration: `b` and `c` in `float a = 0, b, *c;` or `dim3 g(n), b(32)`."""
        names: list[tuple[str, int]] = []
        depth, tokens = 0, self.tokens
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
                    names.append((tokens[k], k))
        return names

    def _declares(self, i: int) -> bool:
        """Whether tokens[i] can end a type that the next name is declared with: a type name or keyword,
        a `*`, `&` or `>` after one, or a `__restrict__`-like qualifier. Not an operator word (`not x;`,
        `a and x`), a `>` that closes no template (`p > x`), nor a macro of its own whose body is no type
        (`#define AMP &`): each would pass off a use of libc's `x` as a declaration of the source's own."""
        token = self.tokens[i]
        if _NAME.fullmatch(token):
            return self._type_word(token)
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
            if j == i:
                return token == ">" and self._closes_template(i)
            # `o & x`, `a && x`, `v * x` with a variable of its own before are expressions, not declarations
            return (_NAME.fullmatch(self.tokens[j]) is not None and self._type_word(self.tokens[j])
                    and self.tokens[j] not in self.variables) \
                or (self.tokens[j] == ">" and self._closes_template(j))
        return False

    def _type_word(self, token: str) -> bool:
        if token in _NOT_TYPES:
            return False
        bodies = [self.tokens[m.start:m.end] for m in self.macros if m.name == token]
        return all(body and _NAME.fullmatch(body[0]) and all(
            _NAME.fullmatch(t) and t not in _NOT_TYPES or t in ("::", "<", ">", "*", "&", ",") for t in body)
            for body in bodies)

    def _closes_template(self, i: int) -> bool:
        depth, j = 0, i
        while j > 0:
            depth += {">": 1, "<": -1}.get(self.tokens[j], 0)
            if depth == 0:
                return _NAME.fullmatch(self.tokens[j - 1]) is not None
            if self.tokens[j] in (";", "{", "}", "(", ")"):
                return False
            j -= 1
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
        if include and (not ALLOWED_HEADERS.fullmatch(include.group(1)) or DENIED_HEADERS.fullmatch(include.group(1))
                        or posixpath.normpath(include.group(1)) != include.group(1)):
            return f"#include <{include.group(1)}> is not a header kernels need"
        if not include and not re.match(r"#\s*(?:define|undef|if|ifdef|ifndef|elif|else|endif|pragma|error)\b",
                                        directive):
            return f"the directive `{directive[:40]}` is not one kernels need"
    why = source.unbalanced()
    if why:
        return why
    own_libc = sorted(source.beside_libc & LIBC_NAMES)
    if own_libc:
        return f"`{own_libc[0]}` is declared here under a C library function's name"
    tokens = source.tokens
    body_of = {i: macro for macro in source.macros for i in range(macro.start, macro.end)}
    free: dict[int, set[str]] = {id(macro): set() for macro in source.macros}  # left to where it is expanded
    for i, token in enumerate(tokens):
        if not _NAME.fullmatch(token):
            continue
        if PY_API.fullmatch(token):  # even as a name of its own: an own `PyRun_String` is a call away from Python's
            return f"`{token}` is the Python C API"
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
            elif token in DENIED_MEMBERS or DENIED_MEMBER_PARTS.search(token) or DENIED_CUDA.fullmatch(token):
                return f"`{root}::{token}` reaches past a kernel's business (threads, files, the environment, " \
                       "TorchScript or operator registration)"
            continue
        after = tokens[i + 1] if i + 1 < len(tokens) else ""
        if token in ALLOWED_ROOTS or (after != "::" and _allowed(token)) or source.in_scope(token, i):
            continue
        macro = body_of.get(i)
        if macro is not None:
            if token not in macro.params:
                free[id(macro)].add(token)  # a macro's body means what it means where it is expanded
            continue
        if after == "::":
            return f"`{token}::` is not a namespace kernels need"
        return f"`{token}` is not something a kernel or its host wrapper needs"
    return _unknown_where_expanded(source, free)


def _unknown_where_expanded(source: _Source, direct: dict[int, set[str]]) -> str | None:
    """A macro's names that its body does not declare must be in scope wherever it is expanded (its parameters
    are replaced there; a macro expanded in another's body leaves them to where that one is expanded)."""
    by_name: dict[str, list[_Macro]] = {}
    for macro in source.macros:
        by_name.setdefault(macro.name, []).append(macro)
    memo: dict[int, set[str]] = {}

    def free(macro: _Macro, seen: frozenset[int]) -> set[str]:
        if id(macro) in memo:
            return memo[id(macro)]
        names = set(direct[id(macro)])
        for i in range(macro.start, macro.end):
            for inner in by_name.get(source.tokens[i], ()):
                if id(inner) not in seen:  # a macro is not expanded inside itself
                    names |= {name for name in free(inner, seen | {id(inner)}) if not source.in_scope(name, i)}
        memo[id(macro)] = names
        return names

    for i in range(source.code_end):
        for macro in by_name.get(source.tokens[i], ()):
            for name in sorted(free(macro, frozenset({id(macro)}))):
                if not source.in_scope(name, i):
                    return f"`{name}` (in the macro `{macro.name}`) is not something a kernel or its host " \
                           "wrapper needs"
    return None


def _qualified_root(tokens: list[str], i: int) -> str:
    """The first name of the `a::b::c` chain that tokens[i] ends ("" for `::read`)."""
    j = i
    while j >= 2 and tokens[j - 1] == "::" and re.fullmatch(r"\w+", tokens[j - 2]):
        j -= 2
    return tokens[j] if j != i else ""
