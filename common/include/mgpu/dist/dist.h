/// @file dist.h
/// @brief Everything of mgpu::dist in one include: runtime, ProcessGroup, Work, logging.
#pragma once

#include "mgpu/dist/log.h"
#include "mgpu/dist/process_group.h"
#include "mgpu/dist/runtime.h"
#include "mgpu/dist/work.h"
