"""The standard library's names and the headers that declare them, for tests/include_check.py.

HEADERS: name -> header(s). A name with several headers is declared by each of them (the standard
says so: size_t by <cstddef>, <cstdio>, <cstring>...; std::size by <iterator> and every container);
including any one is enough. Only what the standard guarantees counts, never what one library
happens to bring along (GCC 13's <string> stopped bringing <cstdint>: core/device.h).
STD_NAMES is for `std::name` (and `std::name::...`); BARE_NAMES for names used without `std::`
(the C library's types, macros and functions, which the <c...> headers also put in the global
namespace in practice; the C headers <stdint.h>... count the same).
A `std::` name missing from the table fails the check: add it here with its header."""
import re

SIZE_T = ("cstddef", "cstdio", "cstring", "cstdlib", "ctime", "cwchar", "cuchar")
CONTAINERS = ("array", "deque", "forward_list", "list", "map", "regex", "set", "span", "string",
              "string_view", "unordered_map", "unordered_set", "vector")
INIT_LIST = ("initializer_list", "utility", "algorithm", "random", "valarray") + CONTAINERS + ("queue", "stack")
STREAMS = ("ios", "iostream", "istream", "ostream", "sstream", "fstream")  # each brings <ios>


def _each(header, names):
    return {name: header for name in names.split()}


STD_NAMES = {
    **_each("algorithm", """all_of any_of none_of for_each for_each_n find find_if find_if_not find_end
        find_first_of adjacent_find count count_if mismatch equal search search_n copy copy_if copy_n
        copy_backward move_backward transform replace replace_if fill fill_n generate generate_n
        remove_if remove_copy unique unique_copy reverse reverse_copy rotate shuffle sample partition
        stable_partition is_partitioned sort stable_sort partial_sort nth_element is_sorted
        is_sorted_until lower_bound upper_bound binary_search equal_range merge inplace_merge includes
        set_union set_intersection set_difference make_heap push_heap pop_heap sort_heap min max minmax
        min_element max_element minmax_element clamp lexicographical_compare next_permutation
        is_permutation swap_ranges iter_swap"""),
    "remove": ("algorithm", "cstdio"),  # the algorithm, and remove(path) of <cstdio>
    "move": "utility",  # (the 3-argument algorithm is rarer: it takes <algorithm> too, not checked)
    **_each("numeric", """accumulate reduce transform_reduce inner_product partial_sum exclusive_scan
        inclusive_scan adjacent_difference iota gcd lcm midpoint"""),
    **_each("utility", """forward exchange swap pair make_pair declval as_const integer_sequence
        index_sequence make_integer_sequence make_index_sequence index_sequence_for in_place
        in_place_t in_place_type piecewise_construct move_if_noexcept cmp_equal cmp_less
        cmp_greater cmp_less_equal cmp_greater_equal in_range"""),
    **_each("tuple", "tuple make_tuple tie forward_as_tuple tuple_cat apply make_from_tuple ignore"),
    "get": ("tuple", "utility", "array", "variant"),
    "tuple_size": ("tuple", "utility", "array", "ranges"),
    "tuple_element": ("tuple", "utility", "array", "ranges"),
    **{name: ("iterator",) + CONTAINERS for name in "begin end cbegin cend rbegin rend size ssize empty data".split()},
    **_each("iterator", """next prev advance distance iterator_traits reverse_iterator back_inserter
        front_inserter inserter make_move_iterator move_iterator istream_iterator ostream_iterator
        istreambuf_iterator ostreambuf_iterator input_iterator_tag output_iterator_tag
        forward_iterator_tag bidirectional_iterator_tag random_access_iterator_tag
        contiguous_iterator_tag back_insert_iterator"""),
    "initializer_list": INIT_LIST,
    "string": "string", "basic_string": "string", "wstring": "string", "u8string": "string",
    "char_traits": "string",
    **_each("string", "to_string stoi stol stoll stoul stoull stof stod stold"),
    "getline": ("string", "istream"),
    "erase": CONTAINERS, "erase_if": CONTAINERS,
    "string_view": "string_view", "basic_string_view": "string_view",
    **_each("vector", "vector"), **_each("array", "array to_array"), **_each("deque", "deque"),
    **_each("list", "list"), **_each("forward_list", "forward_list"), **_each("map", "map multimap"),
    **_each("set", "set multiset"), **_each("unordered_map", "unordered_map unordered_multimap"),
    **_each("unordered_set", "unordered_set unordered_multiset"),
    **_each("queue", "queue priority_queue"), **_each("stack", "stack"),
    **_each("span", "span dynamic_extent as_bytes as_writable_bytes"), **_each("bitset", "bitset"),
    **_each("memory", """unique_ptr make_unique make_unique_for_overwrite shared_ptr make_shared
        make_shared_for_overwrite allocate_shared weak_ptr enable_shared_from_this default_delete
        static_pointer_cast dynamic_pointer_cast const_pointer_cast reinterpret_pointer_cast
        allocator allocator_traits addressof align assume_aligned to_address pointer_traits
        construct_at destroy_at destroy destroy_n uninitialized_copy uninitialized_copy_n
        uninitialized_fill uninitialized_fill_n uninitialized_move uninitialized_default_construct
        uninitialized_value_construct owner_less bad_weak_ptr"""),
    "hash": ("functional", "string", "string_view", "memory", "optional", "variant", "thread",
             "typeindex", "bitset", "vector", "system_error", "filesystem", "coroutine"),
    **_each("functional", """function bind bind_front ref cref reference_wrapper invoke invoke_r mem_fn
        not_fn plus minus multiplies divides modulus negate equal_to not_equal_to less greater
        less_equal greater_equal logical_and logical_or logical_not bit_and bit_or bit_xor identity
        bad_function_call placeholders"""),
    **_each("optional", "optional nullopt nullopt_t make_optional bad_optional_access"),
    **_each("variant", "variant visit holds_alternative get_if monostate variant_size "
                       "variant_alternative bad_variant_access"),
    **_each("any", "any any_cast make_any bad_any_cast"),
    **_each("mutex", """mutex recursive_mutex timed_mutex recursive_timed_mutex lock_guard unique_lock
        scoped_lock once_flag call_once try_to_lock defer_lock adopt_lock try_to_lock_t defer_lock_t
        adopt_lock_t lock try_lock"""),
    **_each("shared_mutex", "shared_mutex shared_timed_mutex shared_lock"),
    **_each("condition_variable", "condition_variable condition_variable_any cv_status notify_all_at_thread_exit"),
    **_each("thread", "thread this_thread jthread"),
    **_each("stop_token", "stop_token stop_source stop_callback"),
    **_each("atomic", """atomic atomic_ref atomic_flag atomic_thread_fence atomic_signal_fence memory_order
        memory_order_relaxed memory_order_consume memory_order_acquire memory_order_release
        memory_order_acq_rel memory_order_seq_cst atomic_bool atomic_int atomic_size_t"""),
    **_each("future", "future shared_future promise packaged_task async launch future_status future_error"),
    **_each("latch", "latch"), **_each("barrier", "barrier"),
    **_each("semaphore", "counting_semaphore binary_semaphore"),
    "chrono": "chrono", "filesystem": "filesystem", "numbers": "numbers", "ranges": ("ranges", "algorithm"),
    "views": "ranges", "execution": "execution", "pmr": "memory_resource",
    **_each("limits", "numeric_limits float_round_style float_denorm_style"),
    **_each("bit", """bit_cast byteswap popcount countl_zero countl_one countr_zero countr_one bit_width
        bit_ceil bit_floor has_single_bit rotl rotr endian"""),
    **_each("concepts", """same_as derived_from convertible_to common_reference_with common_with
        integral signed_integral unsigned_integral floating_point assignable_from swappable
        destructible constructible_from default_initializable move_constructible copy_constructible
        equality_comparable totally_ordered movable copyable semiregular regular invocable
        regular_invocable predicate relation equivalence_relation strict_weak_order"""),
    **_each("compare", """strong_ordering weak_ordering partial_ordering three_way_comparable
        compare_three_way is_eq is_neq is_lt is_lteq is_gt is_gteq"""),
    **_each("exception", """exception exception_ptr current_exception rethrow_exception
        make_exception_ptr terminate set_terminate uncaught_exceptions nested_exception
        throw_with_nested rethrow_if_nested"""),
    **_each("stdexcept", """runtime_error logic_error invalid_argument out_of_range length_error
        domain_error range_error overflow_error underflow_error"""),
    **_each("new", "bad_alloc bad_array_new_length nothrow nothrow_t launder align_val_t new_handler "
                   "set_new_handler hardware_destructive_interference_size"),
    **_each("system_error", "system_error error_code error_condition error_category generic_category "
                            "system_category errc make_error_code"),
    **_each("typeinfo", "type_info bad_cast bad_typeid"), **_each("typeindex", "type_index"),
    **_each("source_location", "source_location"), **_each("charconv", "from_chars to_chars chars_format "
                                                          "from_chars_result to_chars_result"),
    **_each("format", "format format_to vformat formatter"), **_each("ratio", "ratio"),
    **_each("complex", "complex"), **_each("valarray", "valarray"), **_each("regex", "regex smatch sregex_iterator "
                                                                             "regex_match regex_search"),
    **_each("coroutine", "coroutine_handle suspend_always suspend_never"),
    **_each("locale", "locale use_facet"),
    **_each("random", """random_device mt19937 mt19937_64 minstd_rand minstd_rand0 default_random_engine
        seed_seq uniform_int_distribution uniform_real_distribution normal_distribution
        bernoulli_distribution discrete_distribution exponential_distribution poisson_distribution
        generate_canonical philox4x32"""),
    # streams
    **_each("iostream", "cout cerr clog cin wcout wcerr"),
    **{name: ("ostream", "iostream", "iosfwd", "sstream", "fstream") for name in "ostream basic_ostream".split()},
    **{name: ("istream", "iostream", "iosfwd", "sstream", "fstream") for name in "istream basic_istream iostream".split()},
    **{name: ("ostream", "iostream") for name in "endl flush ends".split()},
    **_each("sstream", "ostringstream istringstream stringstream basic_ostringstream basic_stringstream "
                       "stringbuf"),
    **_each("fstream", "ifstream ofstream fstream basic_ifstream basic_ofstream filebuf"),
    **{name: STREAMS for name in """ios ios_base streamsize streamoff fpos basic_ios fixed scientific
        hexfloat defaultfloat hex dec oct boolalpha noboolalpha showpoint noshowpoint showpos
        uppercase left right internal skipws noskipws unitbuf""".split()},
    **_each("iomanip", "setw setprecision setfill setbase put_time get_time quoted put_money"),
    **_each("streambuf", "streambuf basic_streambuf"),
    # the C library
    **_each("cstring", """memcpy memmove memset memcmp memchr strlen strcmp strncmp strchr strrchr strstr
        strcpy strncpy strcat strncat strerror strtok strspn strcspn strpbrk strcoll"""),
    **_each("cstdio", """printf fprintf sprintf snprintf vprintf vfprintf vsnprintf scanf sscanf fscanf
        puts fputs fputc putc putchar fgets fgetc getc getchar fopen freopen fclose fread fwrite fflush
        fseek ftell rewind feof ferror clearerr perror rename tmpfile setvbuf FILE fpos_t"""),
    **_each("cstdlib", """getenv setenv exit quick_exit _Exit abort atexit at_quick_exit malloc calloc
        realloc free aligned_alloc atoi atol atoll atof strtol strtoll strtoul strtoull strtof strtod
        strtold system rand srand qsort bsearch div ldiv lldiv labs llabs"""),
    "abs": ("cmath", "cstdlib"),
    **_each("cmath", """exp exp2 expm1 log log2 log10 log1p pow sqrt cbrt hypot sin cos tan asin acos atan
        atan2 sinh cosh tanh asinh acosh atanh erf erfc tgamma lgamma ceil floor trunc round lround
        llround nearbyint rint lrint llrint fmod remainder remquo copysign nan nanf nanl nextafter
        nexttoward fdim fmax fmin fma fabs frexp ldexp modf scalbn ilogb logb isnan isinf isfinite
        isnormal signbit fpclassify isgreater isless lerp float_t double_t"""),
    **_each("ctime", "time clock clock_t time_t tm difftime mktime strftime localtime gmtime timespec "
                     "timespec_get"),
    **_each("cctype", """isalnum isalpha isblank iscntrl isdigit isgraph islower isprint ispunct isspace
        isupper isxdigit tolower toupper"""),
    **_each("csignal", "signal raise sig_atomic_t"),
    **_each("cstdarg", "va_list"),
    **_each("csetjmp", "jmp_buf longjmp"),
    **{name: "cstdint" for name in """int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t
        intptr_t uintptr_t intmax_t uintmax_t int_fast8_t int_fast16_t int_fast32_t int_fast64_t
        uint_fast8_t uint_fast16_t uint_fast32_t uint_fast64_t int_least8_t int_least16_t
        int_least32_t int_least64_t uint_least8_t uint_least16_t uint_least32_t uint_least64_t""".split()},
    "size_t": SIZE_T,
    **_each("cstddef", "ptrdiff_t nullptr_t max_align_t byte to_integer"),
}

# <type_traits>: the names above are looked up first (is_sorted is <algorithm>'s, is_eq <compare>'s).
TYPE_TRAITS = re.compile(r"""^(is_\w+|remove_\w+|add_\w+|has_\w+|make_signed\w*|make_unsigned\w*|
    enable_if\w*|conditional\w*|decay\w*|common_type\w*|common_reference\w*|underlying_type\w*|
    invoke_result\w*|integral_constant|true_type|false_type|bool_constant|void_t|type_identity\w*|
    aligned_storage\w*|aligned_union\w*|alignment_of\w*|rank\w*|extent\w*|conjunction\w*|
    disjunction\w*|negation\w*|result_of\w*|unwrap_ref\w*)$""", re.X)

C_HEADER = {  # the C library's own names of the <c...> headers
    "stdint.h": "cstdint", "inttypes.h": "cstdint", "cinttypes": "cstdint", "stddef.h": "cstddef",
    "stdio.h": "cstdio", "stdlib.h": "cstdlib", "string.h": "cstring", "math.h": "cmath",
    "errno.h": "cerrno", "signal.h": "csignal", "assert.h": "cassert", "limits.h": "climits",
    "float.h": "cfloat", "time.h": "ctime", "ctype.h": "cctype", "stdarg.h": "cstdarg",
    "setjmp.h": "csetjmp", "wchar.h": "cwchar",
}

# Names used without std:: (matched as whole words; functions only where followed by "(").
BARE_TYPES = {
    **{name: "cstdint" for name in """int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t
        intptr_t uintptr_t intmax_t uintmax_t INT8_MIN INT8_MAX INT16_MIN INT16_MAX INT32_MIN INT32_MAX
        INT64_MIN INT64_MAX UINT8_MAX UINT16_MAX UINT32_MAX UINT64_MAX SIZE_MAX PTRDIFF_MAX
        INTPTR_MAX UINTPTR_MAX INT64_C UINT64_C INT32_C UINT32_C""".split()},
    "size_t": SIZE_T, "NULL": SIZE_T + ("clocale", "cwchar"), "ptrdiff_t": ("cstddef",),
    "max_align_t": ("cstddef",), "offsetof": ("cstddef",),
    **_each("cstdio", "FILE stdout stderr stdin EOF BUFSIZ SEEK_SET SEEK_CUR SEEK_END"),
    **_each("cstdlib", "EXIT_SUCCESS EXIT_FAILURE RAND_MAX"),
    **_each("climits", "CHAR_BIT CHAR_MIN CHAR_MAX SCHAR_MIN SCHAR_MAX UCHAR_MAX SHRT_MIN SHRT_MAX USHRT_MAX "
                       "INT_MIN INT_MAX UINT_MAX LONG_MIN LONG_MAX ULONG_MAX LLONG_MIN LLONG_MAX ULLONG_MAX"),
    **_each("cfloat", "FLT_MAX FLT_MIN FLT_EPSILON FLT_TRUE_MIN DBL_MAX DBL_MIN DBL_EPSILON FLT_MANT_DIG "
                      "DBL_MANT_DIG FLT_DIG DBL_DIG"),
    **_each("cmath", "INFINITY NAN HUGE_VAL HUGE_VALF FP_NAN FP_INFINITE FP_ZERO FP_SUBNORMAL FP_NORMAL"),
    **_each("cerrno", """errno EINTR EAGAIN EWOULDBLOCK ENOENT EEXIST ENOMEM EINVAL EBADF EPIPE ERANGE EACCES
        EIO ENOSPC ECONNREFUSED ECONNRESET ETIMEDOUT EPERM ESRCH ECHILD EISDIR ENOTDIR EXDEV"""),
    **_each("csignal", "SIGINT SIGTERM SIGKILL SIGABRT SIGSEGV SIGFPE SIGILL SIG_DFL SIG_IGN SIG_ERR "
                       "sig_atomic_t"),
    **_each("cstdint", "PRId64 PRIu64 PRIx64 PRId32 PRIu32"),
    **_each("cstdarg", "va_list va_start va_end va_arg va_copy"),
    **_each("ctime", "CLOCKS_PER_SEC time_t clock_t"),
}
# The C functions called without std:: (a name after "." "->" "::" or in a word does not count).
# The math functions are left out: in .cu files CUDA's own headers declare them for the device.
BARE_FUNCTIONS = {
    **_each("cstring", "memcpy memmove memset memcmp memchr strlen strcmp strncmp strchr strrchr strstr "
                       "strcpy strncpy strerror"),
    **_each("cstdio", "printf fprintf snprintf vsnprintf sscanf fopen fclose fread fwrite fflush fputs "
                      "puts perror"),
    **_each("cstdlib", "getenv setenv unsetenv exit _Exit abort atexit malloc calloc realloc free "
                       "aligned_alloc posix_memalign atoi atol atoll strtol strtoll strtoul strtoull strtod"),
    "assert": "cassert",
    # POSIX, the few functions whose names say it (a test's ::getpid() once leaned on another header)
    **_each("unistd.h", "getpid getppid sysconf isatty usleep unlink"),
}


def headers_of(name, table):
    """The headers (a tuple) that declare `name` in `table`, or None."""
    found = table.get(name)
    if found is None and table is STD_NAMES and TYPE_TRAITS.match(name):
        found = "type_traits"
    if found is None:
        return None
    return (found,) if isinstance(found, str) else tuple(found)
