/* cli_cmds.h: the table of subcommands, one line each; the implementation
 * of NAME is iris_cmd_NAME in src/cli/cmd_NAME.c.  Keep the NULL row last. */
#ifndef IRIS_CLI_CMDS_H
#define IRIS_CLI_CMDS_H

#include "cli.h"

int iris_cmd_version(int argc, char **argv);
int iris_cmd_bench(int argc, char **argv);
int iris_cmd_run(int argc, char **argv);
int iris_cmd_caption(int argc, char **argv);
int iris_cmd_ask(int argc, char **argv);
int iris_cmd_describe(int argc, char **argv);
int iris_cmd_detect(int argc, char **argv);
int iris_cmd_logits(int argc, char **argv);
int iris_cmd_inspect(int argc, char **argv);
int iris_cmd_quantize(int argc, char **argv);
int iris_cmd_synth(int argc, char **argv);
int iris_cmd_tokenize(int argc, char **argv);
int iris_cmd_detokenize(int argc, char **argv);
int iris_cmd_pull(int argc, char **argv);
int iris_cmd_ls(int argc, char **argv);
int iris_cmd_plan(int argc, char **argv);
int iris_cmd_preprocess(int argc, char **argv);
int iris_cmd_serve(int argc, char **argv);

static const iris_cli_cmd iris_cli_cmds[] = {
    {"version", iris_cmd_version, "print the version and the build's features"},
    {"inspect", iris_cmd_inspect, "show a checkpoint's config, tensors and sizes without loading it"},
    {"pull", iris_cmd_pull, "download a model from the Hugging Face Hub into the shared cache"},
    {"ls", iris_cmd_ls, "list the models in the Hugging Face cache"},
    {"tokenize", iris_cmd_tokenize, "print the token ids of a text as a JSON array"},
    {"detokenize", iris_cmd_detokenize, "print the text of token ids"},
    {"quantize", iris_cmd_quantize, "write Qwen's block-FP8 format from a BF16 checkpoint"},
    {"synth", iris_cmd_synth, "write a real-shape checkpoint with random weights (benchmarks)"},
    {"preprocess", iris_cmd_preprocess, "decode and preprocess images into pixel_values (.npy)"},
    {"run", iris_cmd_run, "answer a prompt about any number of images, streamed"},
    {"caption", iris_cmd_caption, "caption an image"},
    {"ask", iris_cmd_ask, "answer a question about an image"},
    {"describe", iris_cmd_describe, "scene analysis: objects, setting, activities, visible text"},
    {"detect", iris_cmd_detect, "find things in an image: boxes in pixels as JSON, drawn with --annotate"},
    {"logits", iris_cmd_logits, "write the prompt's logits as .npy (parity checks, debugging)"},
    {"plan", iris_cmd_plan, "what a model needs on a GPU and the context that fits (no GPU needed)"},
    {"serve", iris_cmd_serve, "OpenAI-compatible HTTP server (chat completions with images, streaming)"},
    {"bench", iris_cmd_bench, "prefill and decode speed of a model's text decoder, as JSON"},
    {NULL, NULL, NULL},
};

#endif
