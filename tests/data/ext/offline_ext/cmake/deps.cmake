# depb comes as a GitHub-style archive of tag v1 from a host a mirror replaces.
set(DEP_HOST "git.invalid" CACHE STRING "the server depb's archive is on")
FetchContent_Declare(
    depb
    URL https://${DEP_HOST}/deps/depb/archive/v1.tar.gz
)
