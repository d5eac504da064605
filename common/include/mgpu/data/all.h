/// @file all.h
/// @brief Everything of mgpu::data.
#pragma once

#include "mgpu/data/dataloader.h"
#include "mgpu/data/dataset.h"
#include "mgpu/data/idx.h"
#include "mgpu/data/sampler.h"
#include "mgpu/data/text.h"
#include "mgpu/data/throttled.h"
