#pragma once
/// \file
/// gradix's version, in semantic versioning (MAJOR.MINOR.PATCH; while MAJOR is 0, a MINOR
/// release may change the API, CHANGELOG.md says how). meson.build's project version must be
/// GRADIX_VERSION_STRING: meson refuses to configure otherwise, and the installed pkg-config
/// and CMake files carry the same number.

#define GRADIX_VERSION_MAJOR 0
#define GRADIX_VERSION_MINOR 1
#define GRADIX_VERSION_PATCH 0
#define GRADIX_VERSION_STRING "0.1.0"
/// One number that grows with every release: MAJOR * 10000 + MINOR * 100 + PATCH
/// (`#if GRADIX_VERSION >= 100` for 0.1.0 and later).
#define GRADIX_VERSION (GRADIX_VERSION_MAJOR * 10000 + GRADIX_VERSION_MINOR * 100 + GRADIX_VERSION_PATCH)

namespace gradix {

/// The version of the headers in use, as numbers and as a string.
struct version_info {
  int major;
  int minor;
  int patch;
  char const* string;
};
inline constexpr version_info version{GRADIX_VERSION_MAJOR, GRADIX_VERSION_MINOR, GRADIX_VERSION_PATCH,
                                      GRADIX_VERSION_STRING};

namespace detail {
/// Whether s is "major.minor.patch" in decimal, with these numbers.
constexpr bool version_string_is(char const* s, int major, int minor, int patch) {
  int const want[3] = {major, minor, patch};
  for (int part = 0; part < 3; ++part) {
    if (*s < '0' || *s > '9') return false;
    int v = 0;
    for (; *s >= '0' && *s <= '9'; ++s) v = v * 10 + (*s - '0');
    if (v != want[part]) return false;
    if (part < 2 && *s++ != '.') return false;
  }
  return *s == '\0';
}
}  // namespace detail
static_assert(detail::version_string_is(GRADIX_VERSION_STRING, GRADIX_VERSION_MAJOR, GRADIX_VERSION_MINOR,
                                        GRADIX_VERSION_PATCH),
              "gradix/version.hpp: GRADIX_VERSION_STRING must be MAJOR.MINOR.PATCH of the three numbers");
static_assert(GRADIX_VERSION_MINOR < 100 && GRADIX_VERSION_PATCH < 100,
              "gradix/version.hpp: GRADIX_VERSION needs MINOR and PATCH below 100");

}  // namespace gradix
