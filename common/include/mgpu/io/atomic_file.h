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
/// fsync of a folder: makes the creation, renaming and removal of its entries durable.
void fsync_directory(const std::string& dir);
/// The folder part of a path ("." when there is none).
std::string parent_directory(const std::string& path);
/// The whole content of a file; throws mgpu::Error naming the path when it cannot be read.
std::string read_file(const std::string& path);

}  // namespace mgpu::io
