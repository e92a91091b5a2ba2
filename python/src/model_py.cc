// spillway.Model: a model folder, run folder or GGUF file loaded once, to
// generate text from (streamed as it comes), score texts, encode and decode
// with its tokenizer, and read logits and weights as arrays that NumPy and
// PyTorch take without a copy (DLPack, or the buffer protocol).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "infer/evaluate.h"
#include "infer/generate.h"
#include "infer/generated_text.h"
#include "infer/loaded_model.h"
#include "model/llama_config_json.h"
#include "python/src/bindings.h"
#include "python/src/json_py.h"

namespace nb = nanobind;

namespace spillway::python {

namespace {

struct Model {
  infer::LoadedModel loaded;
  std::string device;  // "auto", "cpu" or "cuda": where its decoders run
};

// Text pieces of one generation, pulled by Python's iteration. It holds the
// model alive (keep_alive) and its own decoder.
class Generation {
 public:
  Generation(const Model& model, const std::string& prompt, int64_t max_tokens, const infer::SamplingOptions& s)
      : prompt_ids_(infer::prompt_ids(*model.loaded.tokenizer, prompt)), text_(*model.loaded.tokenizer, prompt_ids_) {
    const Tokenizer& tok = *model.loaded.tokenizer;
    infer::check_context(model.loaded.weights.config(), static_cast<int64_t>(prompt_ids_.size()), max_tokens);
    decoder_ = infer::make_decoder(model.loaded.weights, static_cast<int64_t>(prompt_ids_.size()) + max_tokens,
                                   model.device);
    infer::GenerateOptions g;
    g.max_new_tokens = max_tokens;
    g.sampling = s;
    g.stop_tokens = tok.roles().stops;
    g.vocab_limit = tok.vocab_size();
    stream_.emplace(*decoder_, prompt_ids_, g);
  }

  // The next piece of text; nullopt at the end. Tokens that complete no
  // character yet make no piece of their own.
  std::optional<std::string> next() {
    while (!finished_) {
      const std::optional<int32_t> id = stream_->next();
      if (!id) {
        finished_ = true;
        std::string rest = text_.finish();
        if (!rest.empty()) return rest;
        break;
      }
      std::string piece = text_.add(*id);
      if (!piece.empty()) return piece;
    }
    return std::nullopt;
  }
  const std::vector<int32_t>& tokens() const { return text_.tokens(); }
  // The model's Python object, whose weights and tokenizer this reads.
  void hold(nb::object model) { model_ = std::move(model); }

 private:
  nb::object model_;
  std::vector<int32_t> prompt_ids_;
  infer::GeneratedText text_;
  std::unique_ptr<infer::Decoder> decoder_;
  std::optional<infer::TokenStream> stream_;
  bool finished_ = false;
};

infer::SamplingOptions sampling(double temperature, int64_t top_k, double top_p, uint64_t seed) {
  return {.temperature = temperature, .top_k = top_k, .top_p = top_p, .seed = seed};
}

using Logits = nb::ndarray<nb::array_api, float, nb::ndim<2>, nb::c_contig, nb::device::cpu>;
using WeightArray = nb::ndarray<nb::array_api, float, nb::c_contig, nb::device::cpu>;

// Logits [len(ids), vocab] of `ids` fed from the first position, in memory
// the returned array owns.
Logits logits(const Model& m, const std::vector<int32_t>& ids) {
  SPW_CHECK(!ids.empty(), "logits", "ids is empty; give at least one token id");
  const model::LlamaConfig& c = m.loaded.weights.config();
  SPW_CHECK(static_cast<int64_t>(ids.size()) <= c.max_position_embeddings, "logits", ids.size(),
            " ids are more than the model's context of ", c.max_position_embeddings, " tokens");
  auto* rows = new std::vector<float>();
  {
    nb::gil_scoped_release no_gil;
    try {
      std::unique_ptr<infer::Decoder> decoder =
          infer::make_decoder(m.loaded.weights, static_cast<int64_t>(ids.size()), m.device);
      *rows = decoder->forward(ids);
    } catch (...) {
      delete rows;
      throw;
    }
  }
  nb::capsule owner(rows, [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
  const size_t vocab = rows->size() / ids.size();
  return Logits(rows->data(), {ids.size(), vocab}, owner);
}

double eval_texts(const Model& m, nb::handle texts, int64_t seq) {
  std::vector<std::string> list;
  if (nb::isinstance<nb::str>(texts)) {
    list.push_back(nb::cast<std::string>(texts));
  } else {
    list = nb::cast<std::vector<std::string>>(texts);
  }
  SPW_CHECK(!list.empty(), "eval", "no texts given");
  nb::gil_scoped_release no_gil;
  const int64_t window = infer::eval_window(m.loaded.weights.config(), seq);
  std::unique_ptr<infer::Decoder> decoder = infer::make_decoder(m.loaded.weights, window + 1, m.device);
  infer::LossSum sum;
  // Each text whole, as `spillway eval` scores each file.
  for (const std::string& text : list) infer::add_loss(*decoder, m.loaded.tokenizer->encode_text(text), window, sum);
  SPW_CHECK(sum.tokens > 0, "eval", "the texts hold too little to predict a token");
  return sum.mean();
}

}  // namespace

void bind_model(nb::module_& m) {
  nb::class_<Tokenizer>(m, "Tokenizer", "A model's tokenizer, as Hugging Face `tokenizers` runs it.")
      .def("encode", [](const Tokenizer& t, const std::string& text, bool add_special_tokens, bool allow_special) {
             return add_special_tokens ? t.encode_text(text, allow_special) : t.encode(text, allow_special);
           }, nb::arg("text"), nb::arg("add_special_tokens") = true, nb::arg("allow_special") = false,
           "Text to ids; with add_special_tokens a BOS first where the model's texts start with one (as "
           "transformers' tokenizer(text)); with allow_special the text of a special token becomes its id.")
      .def("decode", [](const Tokenizer& t, const std::vector<int32_t>& ids) { return t.decode(ids); },
           nb::arg("ids"), "Ids to text, special tokens as their text.")
      .def_prop_ro("vocab_size", &Tokenizer::vocab_size)
      .def_prop_ro("bos_id", &Tokenizer::bos_id)
      .def_prop_ro("eos_id", &Tokenizer::eos_id)
      .def("__len__", &Tokenizer::vocab_size);

  nb::class_<Generation>(m, "Generation", "Text pieces of one generation, as they come.")
      .def("__iter__", [](nb::handle self) { return self; })
      .def("__next__", [](Generation& g) {
        std::optional<std::string> piece;
        {
          nb::gil_scoped_release no_gil;
          piece = g.next();
        }
        if (!piece) throw nb::stop_iteration();
        return *piece;
      })
      .def_prop_ro("tokens", &Generation::tokens, "The ids generated so far.");

  nb::class_<Model>(m, "Model", "A LLaMA-family model and its tokenizer, loaded for running.")
      .def_static("load", [](nb::handle path_object, const std::string& device) {
            const std::string path = path_text(path_object);
            nb::gil_scoped_release no_gil;
            return Model{infer::load_model(path), device};
          }, nb::arg("path"), nb::arg("device") = "auto",
          "A model folder, a run folder (its latest checkpoint) or a GGUF file; device: auto (the GPU when "
          "there is one), cpu or cuda.")
      .def_prop_ro("source", [](const Model& self) { return self.loaded.source; }, "The folder or file read.")
      .def_prop_ro("config", [](const Model& self) {
            return to_python(model::config_to_json(self.loaded.weights.config()));
          },
                   "The model's config.json, as a dict.")
      .def_prop_ro("tokenizer", [](const Model& self) -> const Tokenizer& { return *self.loaded.tokenizer; },
                   nb::rv_policy::reference_internal)
      .def("generate", [](nb::handle self, const std::string& prompt, int64_t max_tokens, double temperature,
                          int64_t top_k, double top_p, uint64_t seed, bool stream) -> nb::object {
             auto g = std::make_unique<Generation>(nb::cast<const Model&>(self), prompt, max_tokens,
                                                   sampling(temperature, top_k, top_p, seed));
             if (stream) {
               g->hold(nb::borrow(self));
               return nb::cast(g.release(), nb::rv_policy::take_ownership);
             }
             std::string text;
             {
               nb::gil_scoped_release no_gil;
               while (std::optional<std::string> piece = g->next()) text += *piece;
             }
             return nb::str(text.c_str(), text.size());
           }, nb::arg("prompt") = "", nb::kw_only(), nb::arg("max_tokens") = 200, nb::arg("temperature") = 0.8,
           nb::arg("top_k") = 0, nb::arg("top_p") = 1.0, nb::arg("seed") = 0, nb::arg("stream") = false,
           "The text the model continues `prompt` with (a new document when empty), as `spillway generate` "
           "writes it: sampled with temperature (0: greedy), top-k and top-p from `seed`, ending at a stop token "
           "or after max_tokens. With stream=True an iterator of text pieces as they come.")
      .def("eval", &eval_texts, nb::arg("texts"), nb::arg("seq") = 0,
           "Mean loss in nats of every token of the texts (one or a list) given those before it, each text "
           "scored whole in windows of `seq` tokens (0: the model's context, at most 2048), as `spillway eval`.")
      .def("logits", &logits, nb::arg("ids"),
           "Logits [len(ids), vocab] (float32) of ids fed from the first position, as an array NumPy "
           "(numpy.from_dlpack) and PyTorch (torch.from_dlpack) take without a copy.")
      .def_prop_ro("weights", [](nb::handle self_handle) {
            Model& self = nb::cast<Model&>(self_handle);
            nb::dict out;
            for (model::NamedTensor& t : self.loaded.weights.tensors()) {
              std::vector<size_t> shape(t.shape.dims().begin(), t.shape.dims().end());
              out[t.name.c_str()] = WeightArray(t.data.data(), shape.size(), shape.data(), self_handle);
            }
            return out;
          }, "The float32 weights by Hugging Face name, as arrays over the model's own memory (no copy): what "
             "is written into them changes the model.");
}

}  // namespace spillway::python
