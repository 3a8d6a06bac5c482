#include "prepare/calibration.h"

#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "model/chat_template.h"
#include "model/gguf.h"
#include "model/tokenizer.h"

namespace kx {

const std::vector<std::string>& CalibrationInstructions() {
  // Varied on purpose: facts, reasoning, code, stories, advice, lists and
  // dialogue exercise different neurons; the answers are the model's own.
  static const std::vector<std::string> kInstructions = {
      "Explain how photosynthesis works in simple terms.",
      "Write a short story about a lighthouse keeper who finds a message in a bottle.",
      "What are the main causes of the French Revolution?",
      "Write a Python function that checks whether a string is a palindrome.",
      "Give me five tips for sleeping better.",
      "Describe the water cycle to a ten-year-old.",
      "What is the difference between a virus and a bacterium?",
      "Write a polite email asking my landlord to fix the heating.",
      "Summarize the plot of Romeo and Juliet.",
      "How do I make a simple tomato sauce?",
      "Explain what a neural network is.",
      "Write a haiku about autumn leaves.",
      "What should I pack for a weekend hiking trip?",
      "Why is the sky blue?",
      "Explain the rules of chess briefly.",
      "Write a C function that reverses a linked list.",
      "What are the benefits of regular exercise?",
      "Describe the city of Paris to someone who has never been there.",
      "How does a bank loan work?",
      "Write a dialogue between a cat and a dog arguing about dinner.",
      "What is 17 times 23? Show your steps.",
      "List the planets of the solar system with one fact about each.",
      "How can I improve my public speaking?",
      "Explain the theory of evolution.",
      "Write a limerick about a programmer.",
      "What happened during the Apollo 11 mission?",
      "Give me a recipe for pancakes.",
      "How do vaccines train the immune system?",
      "Write a product description for a reusable water bottle.",
      "What are some good ways to learn a new language?",
      "Explain how a car engine works.",
      "Tell me about the history of the printing press.",
      "Write a short poem about the ocean at night.",
      "What is climate change and what can individuals do about it?",
      "Explain recursion with an example.",
      "How do I write a good cover letter?",
      "Describe a typical day in the life of a medieval farmer.",
      "What are prime numbers? Give examples.",
      "Write a JavaScript snippet that fetches JSON from a URL.",
      "Compare cats and dogs as pets.",
  };
  return kInstructions;
}

namespace {

absl::StatusOr<CalibrationSet> FromText(Engine& engine, const CalibrationOptions& opt) {
  std::ifstream in(opt.text_file, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read calibration text ", opt.text_file));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::vector<int32_t> ids = engine.tokenizer().Encode(ss.str(), false, false);
  const int len = std::min(opt.seq_len, engine.n_ctx());
  if (static_cast<int64_t>(ids.size()) < len) {
    return absl::InvalidArgumentError(absl::StrCat("calibration text ", opt.text_file, " has only ",
                                                   ids.size(), " tokens; need at least ", len));
  }
  CalibrationSet set;
  for (size_t at = 0; at + len <= ids.size() && set.n_tokens < opt.token_budget; at += len) {
    set.sequences.emplace_back(ids.begin() + at, ids.begin() + at + len);
    set.n_tokens += len;
  }
  set.source = absl::StrCat("text file ", opt.text_file, ", chunks of ", len, " tokens");
  return set;
}

}  // namespace

absl::StatusOr<CalibrationSet> BuildCalibration(
    Engine& engine, const CalibrationOptions& opt,
    const std::function<void(int64_t, int64_t)>& progress) {
  if (opt.token_budget <= 0) return absl::InvalidArgumentError("calibration budget must be > 0");
  engine.TruncateKv(0);
  if (!opt.text_file.empty()) return FromText(engine, opt);

  const Tokenizer& tok = engine.tokenizer();
  auto tmpl = engine.gguf().GetString("tokenizer.chat_template");
  const std::string source = tmpl.ok() ? std::string(*tmpl) : std::string();
  const ChatTemplateKind kind = ChatTemplateForGguf(engine.gguf());
  const std::string default_system = ExtractDefaultSystemPrompt(source);

  SamplerParams sp;
  sp.temperature = opt.temperature;
  Sampler sampler(sp);
  CalibrationSet set;
  const auto& instructions = CalibrationInstructions();
  for (int64_t round = 0; set.n_tokens < opt.token_budget; ++round) {
    const std::string& text = instructions[round % instructions.size()];
    const std::vector<ChatMessage> messages = {{"user", text}};
    const std::string prompt = ApplyChatTemplate(kind, messages, true, default_system);
    std::vector<int32_t> seq = tok.Encode(prompt, true, true);
    const int room = engine.n_ctx() - static_cast<int>(seq.size());
    if (room <= 1) return absl::InvalidArgumentError("context too small for calibration prompts");
    sampler.Reset(opt.seed * 1000003u + static_cast<uint64_t>(round));
    engine.TruncateKv(0);
    KX_RETURN_IF_ERROR(engine.Eval(seq));
    const int max_new = std::min(opt.max_new_tokens, room - 1);
    for (int i = 0; i < max_new; ++i) {
      const int32_t next = sampler.Sample(engine.Logits(), seq);
      seq.push_back(next);
      if (tok.IsEndOfGeneration(next)) break;
      KX_RETURN_IF_ERROR(engine.Eval(std::span<const int32_t>(&seq.back(), 1)));
    }
    set.n_tokens += static_cast<int64_t>(seq.size());
    set.sequences.push_back(std::move(seq));
    if (progress) progress(std::min(set.n_tokens, opt.token_budget), opt.token_budget);
  }
  engine.TruncateKv(0);
  set.source = absl::StrCat("the model's own answers to ", instructions.size(),
                            " built-in instructions (", std::string(ChatTemplateName(kind)),
                            " template, temperature ", opt.temperature, ", seed ", opt.seed, ")");
  return set;
}

}  // namespace kx
