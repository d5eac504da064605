/// @file atomic_file.h
/// @brief Writing a file so that a crash leaves the old version or the new one, never a mix.
///
/// The protocol (POSIX): write the bytes to a temporary file in the same folder, fsync it
/// (the data is on disk before any name points to it), rename it over the final name (a
/// rename within one file system replaces the name in one step), then fsync the folder (the
/// rename itself is on disk). A process killed at any instant leaves at worst a stray
/// temporary file; a machine that loses power after the folder's fsync keeps the new file.
///
/// atomic_replace and fsync_directory are lesson 07's (task 3, atomic_save.cpp): declared
/// here, defined in the lesson's exercise file; the library is built with its reference
/// (solutions/07_checkpointing/).
#pragma once

#include <string>
#include <string_view>

namespace mgpu::io {

/// Writes `bytes` to dir/name with the protocol above, through the temporary file
/// dir/.NAME.tmp.PID. Throws mgpu::Error naming the file, the step and the system's reason
/// (disk full, no permission, no such folder); on failure the temporary file is removed and
/// dir/name is untouched.
void atomic_replace(const std::string& dir, const std::string& name, std::string_view bytes);
/// Checks, before any work, that atomic_replace can write `path`: creates and removes its
/// temporary file (its folder exists and may be written). Throws mgpu::Error naming the path
/// and the system's reason. Leaves nothing behind, and never creates `path` itself.
void probe_writable(const std::string& path);
/// fsync of a folder: makes the creation, renaming and removal of its entries durable.
void fsync_directory(const std::string& dir);
/// The folder part of a path ("." when there is none).
std::string parent_directory(const std::string& path);
/// The whole content of a file; throws mgpu::Error naming the path when it cannot be read
/// or is not a regular file (open_regular_file).
std::string read_file(const std::string& path);
/// Opens `path` for reading (O_RDONLY, close-on-exec) and returns the descriptor, only when
/// it is a regular file (after following symlinks): a folder, a device (/dev/zero), a FIFO
/// (opened without blocking), a socket, a dangling symlink or a symlink loop is refused with
/// mgpu::Error saying what the path is.
int open_regular_file(const std::string& path);
/// What `path` is, for messages: "a regular file", "a folder", "a character device", "a
/// FIFO (named pipe)", "a symlink loop", "a dangling symlink", "missing", ...
std::string describe_path(const std::string& path);

}  // namespace mgpu::io
