#include "tokenizer/regex.h"

#include <pcre2.h>

#include "tokenizer/utf8.h"
#include "util/error.h"

namespace fp4serve::tokenizer {

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

namespace {

// Each thread gets one growable JIT stack: long runs (a 1 MB word of letters) need more than
// PCRE2's 32 KiB default, and sharing one stack between threads is not allowed.
pcre2_match_context* thread_match_context() {
  struct Context {
    pcre2_jit_stack* stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
    pcre2_match_context* context = pcre2_match_context_create(nullptr);
    Context() { pcre2_jit_stack_assign(context, nullptr, stack); }
    ~Context() {
      pcre2_match_context_free(context);
      pcre2_jit_stack_free(stack);
    }
  };
  thread_local Context ctx;
  return ctx.context;
}

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof buffer);
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

Regex::Regex(std::string_view pattern, bool literal, const std::string& where)
    : pattern_(pattern), code_(std::make_unique<Code>()) {
  // PCRE2_LITERAL refuses PCRE2_UCP (there are no classes in a literal to apply it to).
  const uint32_t options = PCRE2_UTF | PCRE2_NO_UTF_CHECK | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  int error = 0;
  PCRE2_SIZE offset = 0;
  code_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                              &error, &offset, nullptr);
  if (code_->code == nullptr) {
    fail(where, ": invalid regex at offset ", offset, ": ", pcre2_message(error), " (pattern: ", pattern, ")");
  }
  // JIT is an optimization: a platform without it still matches, only slower.
  code_->jit = pcre2_jit_compile(code_->code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

void Regex::for_each_match(std::string_view text,
                           const std::function<void(std::size_t, std::size_t)>& on_match) const {
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_->code, nullptr);
  struct Free {
    pcre2_match_data* md;
    ~Free() { pcre2_match_data_free(md); }
  } guard{md};
  pcre2_match_context* ctx = thread_match_context();
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  std::size_t start = 0;
  while (start <= text.size()) {
    const int rc = code_->jit ? pcre2_jit_match(code_->code, subject, text.size(), start, 0, md, ctx)
                              : pcre2_match(code_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, md, ctx);
    if (rc == PCRE2_ERROR_NOMATCH) return;
    if (rc < 0) fail("regex match failed: ", pcre2_message(rc), " (pattern: ", pattern_, ")");
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const std::size_t b = ov[0], e = ov[1];
    on_match(b, e);
    if (e > b) {
      start = e;
    } else {
      if (e >= text.size()) return;
      start = e + utf8::sequence_length(static_cast<unsigned char>(text[e]));
    }
  }
}

Regex make_pattern(const JsonField& field) {
  if (field.has("Regex")) return Regex(field["Regex"].string(), false, field["Regex"].where());
  if (field.has("String")) return Regex(field["String"].string(), true, field["String"].where());
  field.fail_here("expected an object with a \"Regex\" or \"String\" member");
}

}  // namespace fp4serve::tokenizer
