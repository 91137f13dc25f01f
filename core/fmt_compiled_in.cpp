// fmt's compiled half, compiled into Ember once, for a build that cannot link Debian's libfmt.so
// (CMakeLists.txt: EMBER_FMT_COMPILED_IN): what fmt's own src/format.cc holds. Against clang's libc++
// (CI's sanitizer build), because libfmt.so is built against GCC's libstdc++, whose std::string and
// std::locale are other types than libc++'s; with a GCC older than the one that built libfmt.so
// (Debian 13's needs GCC 14's libstdc++: GCC 13 cannot link it). fmt header-only (FMT_HEADER_ONLY)
// would instead compile all of fmt into every file of Ember, which doubled each file's compile time.
// Empty in a build that links libfmt.so.
#if defined(EMBER_FMT_COMPILED_IN)
#include <fmt/format-inl.h>

#include <locale>

FMT_BEGIN_NAMESPACE
namespace detail {

template FMT_API auto dragonbox::to_decimal(float x) noexcept -> dragonbox::decimal_fp<float>;
template FMT_API auto dragonbox::to_decimal(double x) noexcept -> dragonbox::decimal_fp<double>;
template FMT_API locale_ref::locale_ref(const std::locale& loc);
template FMT_API auto locale_ref::get<std::locale>() const -> std::locale;
template FMT_API auto thousands_sep_impl(locale_ref) -> thousands_sep_result<char>;
template FMT_API auto decimal_point_impl(locale_ref) -> char;
template FMT_API void buffer<char>::append(const char*, const char*);
#if FMT_VERSION >= 100000  // fmt 10 (Debian 13) names the arguments' type this way
template FMT_API void vformat_to(buffer<char>&, string_view, typename vformat_args<>::type, locale_ref);
#else
template FMT_API void vformat_to(buffer<char>&, string_view, basic_format_args<FMT_BUFFER_CONTEXT(char)>,
                                 locale_ref);
#endif
template FMT_API auto thousands_sep_impl(locale_ref) -> thousands_sep_result<wchar_t>;
template FMT_API auto decimal_point_impl(locale_ref) -> wchar_t;
template FMT_API void buffer<wchar_t>::append(const wchar_t*, const wchar_t*);

}  // namespace detail
FMT_END_NAMESPACE
#endif
