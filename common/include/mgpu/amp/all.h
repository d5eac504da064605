/// @file all.h
/// @brief Everything of mgpu::amp: the autocast policy, GradScaler and its kernels.
#pragma once

#include "mgpu/amp/grad_scaler.h"
#include "mgpu/amp/scaling.h"
#include "mgpu/nn/autocast.h"
