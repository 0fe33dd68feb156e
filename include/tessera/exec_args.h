// What is said of a child process afterwards: its wait status in words, its log's tail. (Starting
// one: tessera/subprocess.h.)
#pragma once

#include <cstddef>
#include <string>

namespace tessera {

// A child's wait status in words: "exit code 0", "signal 9", "wait status N".
std::string DescribeWaitStatus(int status);

// The last `lines` lines of a text file (a child's log); "" if it cannot be read.
std::string TailOfFile(const std::string& path, std::size_t lines);

}  // namespace tessera
