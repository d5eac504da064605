/// @file all.h
/// @brief Everything of mgpu::nn: modules, layers, the loss, initialisation.
#pragma once

#include "mgpu/nn/activation.h"
#include "mgpu/nn/attention.h"
#include "mgpu/nn/batchnorm.h"
#include "mgpu/nn/conv2d.h"
#include "mgpu/nn/dropout.h"
#include "mgpu/nn/embedding.h"
#include "mgpu/nn/functional.h"
#include "mgpu/nn/gpt.h"
#include "mgpu/nn/init.h"
#include "mgpu/nn/layernorm.h"
#include "mgpu/nn/linear.h"
#include "mgpu/nn/loss.h"
#include "mgpu/nn/maxpool2d.h"
#include "mgpu/nn/models.h"
#include "mgpu/nn/module.h"
#include "mgpu/nn/parameter.h"
