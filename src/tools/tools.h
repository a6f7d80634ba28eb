/*
 * tools.h — the face of the tools library (libtokenkv_tools, not part of
 * libtokenkv): what `tokenkv mkmodel` and the tests use to make model files.
 *
 *   gguf_write.h  a GGUF image built in memory (any metadata, any tensors,
 *                 valid or deliberately not)
 *   quantize.h    float rows to the block formats the writer stores
 *   quantize_file.h a whole GGUF model to a quantization mix (`tokenkv quantize`)
 *   model_write.h the hyperparameters and random weights of a model of any
 *                 supported architecture
 *
 * Callers outside src/ include this header only.
 */
#ifndef TKV_TOOLS_H
#define TKV_TOOLS_H

#include "gguf_write.h"
#include "quantize.h"
#include "quantize_file.h"
#include "model_write.h"

#endif
