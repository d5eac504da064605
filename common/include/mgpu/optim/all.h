/// @file all.h
/// @brief Everything of mgpu::optim.
#pragma once

#include "mgpu/optim/adamw.h"
#include "mgpu/optim/optimizer.h"
#include "mgpu/optim/sgd.h"
