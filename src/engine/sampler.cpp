#include "engine/sampler.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <numeric>

#include "base/check.h"
#include "specdecode/rejection_sampler.h"

namespace specstack {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
// Below this, dividing by the temperature only amplifies rounding noise and
// argmax is what the caller meant (vLLM's cut-off too).
constexpr float kGreedyTemperature = 1e-5f;
// top-p buckets: 1/8 nat of log probability each, up to p / p_max = e^-64
// (beyond that everything shares the last bucket).
constexpr float kBucketsPerUnit = 8.0f;
constexpr float kBucketRange = 64.0f;
constexpr size_t kNumBuckets = static_cast<size_t>(kBucketRange * kBucketsPerUnit) + 1;

// Best first: higher logit, then lower id, so every selection below is a
// deterministic function of the logits (NaN was replaced, so this is a strict
// weak order).
struct ByLogitDesc {
  const float* logits;
  bool operator()(int32_t a, int32_t b) const {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  }
};

// Probability relative to the most likely token (which gets exactly 1, also
// when max_logit is +inf).
float relative_weight(float logit, float max_logit, float inv_temperature) {
  return logit == max_logit ? 1.0f : std::exp((logit - max_logit) * inv_temperature);
}

int32_t last_positive(const std::vector<float>& weights, size_t n) {
  while (n > 1 && weights[n - 1] == 0.0f) --n;
  return static_cast<int32_t>(n - 1);
}

uint64_t initial_seed(const std::optional<uint64_t>& seed) {
  if (seed) return *seed;
  std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) ^ device();
}

}  // namespace

Sampler::Sampler(const SamplingParams& params, std::span<const int32_t> prompt_ids)
    : params_(params), rng_(initial_seed(params.seed)) {
  // Only the repetition penalty reads the prompt's tokens. Without one the
  // sort below is skipped: it cost ~0.5 ms of every 8K-token request's time to
  // first token on the H100 host (and grows with the prompt).
  if (params.repetition_penalty == 1.0f) return;
  // The vocab size is unknown until the first logits arrive, so deduplicate by
  // sorting instead of through seen_mask_ (a bogus huge id must not allocate).
  for (int32_t id : prompt_ids) {
    if (id >= 0) seen_tokens_.push_back(id);
  }
  std::sort(seen_tokens_.begin(), seen_tokens_.end());
  seen_tokens_.erase(std::unique(seen_tokens_.begin(), seen_tokens_.end()), seen_tokens_.end());
}

void Sampler::apply_penalties(std::span<float> logits) const {
  const size_t vocab = logits.size();
  const float repetition = params_.repetition_penalty;
  if (repetition != 1.0f) {
    // HF/CTRL: dividing a negative logit would raise it, so those multiply.
    for (int32_t token : seen_tokens_) {
      if (static_cast<size_t>(token) >= vocab) continue;
      float& logit = logits[token];
      logit = logit > 0.0f ? logit / repetition : logit * repetition;
    }
  }
  const float frequency = params_.frequency_penalty;
  const float presence = params_.presence_penalty;
  if (frequency != 0.0f || presence != 0.0f) {
    for (const auto& [token, count] : output_counts_) {
      if (static_cast<size_t>(token) >= vocab) continue;
      logits[token] -= frequency * static_cast<float>(count) + presence;  // count >= 1
    }
  }
}

int32_t Sampler::prepare(std::span<float> logits, float& max_logit) {
  SS_CHECK(!logits.empty());
  const size_t vocab = logits.size();
  track_vocab(vocab);
  apply_penalties(logits);

  // A NaN (a broken model row) must neither win nor poison the sums.
  size_t best = 0;
  max_logit = -kInf;
  for (size_t i = 0; i < vocab; ++i) {
    const float logit = logits[i];
    if (std::isnan(logit)) {
      logits[i] = -kInf;
    } else if (logit > max_logit) {  // strict: ties go to the lowest id
      max_logit = logit;
      best = i;
    }
  }
  return static_cast<int32_t>(best);
}

Sampler::Candidates Sampler::weigh(std::span<const float> logits, float max_logit) {
  const float inv_temperature = 1.0f / params_.temperature;
  const bool top_k_on = params_.top_k > 0 && static_cast<size_t>(params_.top_k) < logits.size();
  const bool top_p_on = params_.top_p < 1.0f;
  if (top_k_on) return {.n = weigh_top_k(logits, max_logit, inv_temperature)};
  if (top_p_on) return {.n = weigh_top_p(logits, max_logit, inv_temperature)};
  return {
      .dense = true, .n = logits.size(), .total = weigh_dense(logits, max_logit, inv_temperature)};
}

int32_t Sampler::sample(std::span<float> logits) {
  float max_logit = -kInf;
  int32_t token = prepare(logits, max_logit);
  // All -inf: nothing to draw from; token 0 is as good as any and never crashes.
  if (!greedy() && max_logit != -kInf) {
    const Candidates candidates = weigh(logits, max_logit);
    token =
        candidates.dense ? draw_dense(candidates.n, candidates.total) : draw_among(candidates.n);
  }
  record(token);
  return token;
}

void Sampler::distribution(std::span<float> logits, std::vector<float>& probs) {
  float max_logit = -kInf;
  const int32_t best = prepare(logits, max_logit);
  probs.assign(logits.size(), 0.0f);
  if (greedy() || max_logit == -kInf) {
    probs[best] = 1.0f;
    return;
  }
  const Candidates candidates = weigh(logits, max_logit);
  if (candidates.dense) {
    for (size_t i = 0; i < candidates.n; ++i) {
      probs[i] = static_cast<float>(scratch_[i] / candidates.total);
    }
    return;
  }
  // The same sum, in the same order, as draw_among's.
  double total = 0.0;
  for (size_t j = 0; j < candidates.n; ++j) total += scratch_[order_[j]];
  for (size_t j = 0; j < candidates.n; ++j) {
    const int32_t token = order_[j];
    probs[token] = static_cast<float>(scratch_[token] / total);
  }
}

int32_t Sampler::draw(std::span<const float> probs) {
  return draw_from(probs, uniform());
}

void Sampler::record_output(int32_t token) {
  SS_CHECK_GE(token, 0);
  // Only penalties read what was generated: without them the bookkeeping
  // (a vocab-sized mask on first use) would be paid for nothing.
  if (!params_.has_penalties()) return;
  track_vocab(static_cast<size_t>(token) + 1);  // before the first logits the vocab is unknown
  record(token);
}

namespace {

// A uniform as the device reads it: fp32, kept below 1.
float device_uniform(double u) {
  return std::min(static_cast<float>(u), std::nextafter(1.0f, 0.0f));
}

}  // namespace

RowSampling Sampler::device_rule() const {
  RowSampling sampling;
  if (greedy()) return sampling;
  sampling.temperature = params_.temperature;
  sampling.top_k = params_.top_k;
  sampling.top_p = params_.top_p;
  sampling.min_p = params_.min_p;
  return sampling;
}

RowSampling Sampler::device_draw() {
  RowSampling sampling = device_rule();
  if (!greedy()) sampling.uniform = device_uniform(uniform());
  return sampling;
}

std::vector<float> Sampler::peek_uniforms(int32_t n) const {
  std::mt19937_64 ahead = rng_;  // the generator only: the penalty state is vocab-sized
  std::vector<float> out;
  for (int32_t i = 0; i < n; ++i) out.push_back(device_uniform(uniform_of(ahead)));
  return out;
}

void Sampler::skip_uniforms(int32_t n) {
  for (int32_t i = 0; i < n; ++i) uniform();
}

bool Sampler::greedy() const {
  // Written as "not above" so that a NaN temperature (validate() rejects it)
  // stays greedy, as sample() always treated it.
  return !(params_.temperature >= kGreedyTemperature);
}

void Sampler::track_vocab(size_t vocab) {
  if (seen_mask_.size() >= vocab) return;
  seen_mask_.assign(vocab, 0);
  for (int32_t token : seen_tokens_) {
    if (static_cast<size_t>(token) < vocab) seen_mask_[token] = 1;
  }
}

void Sampler::record(int32_t token) {
  ++output_counts_[token];
  SS_CHECK_LT(static_cast<size_t>(token), seen_mask_.size());
  if (!seen_mask_[token]) {
    seen_mask_[token] = 1;
    seen_tokens_.push_back(token);
  }
}

double Sampler::uniform() {
  return uniform_of(rng_);
}

double Sampler::uniform_of(std::mt19937_64& rng) {
  // The top 53 bits, so the draw does not depend on the standard library's
  // distribution implementation (reproducible across toolchains).
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

double Sampler::weigh_dense(std::span<const float> logits, float max_logit, float inv_temperature) {
  const size_t vocab = logits.size();
  // p / p_max >= min_p is weight >= min_p; the max token (weight 1) survives.
  const float min_weight = std::min(params_.min_p, 1.0f);
  scratch_.resize(vocab);
  double total = 0.0;
  for (size_t i = 0; i < vocab; ++i) {
    const float weight = relative_weight(logits[i], max_logit, inv_temperature);
    scratch_[i] = weight < min_weight ? 0.0f : weight;
    total += scratch_[i];
  }
  return total;
}

int32_t Sampler::draw_dense(size_t vocab, double total) {
  const double target = uniform() * total;
  double cumulative = 0.0;
  for (size_t i = 0; i < vocab; ++i) {
    // A zero weight never crosses the target: the sum before it did not.
    cumulative += scratch_[i];
    if (cumulative > target) return static_cast<int32_t>(i);
  }
  return last_positive(scratch_, vocab);  // target rounded up to the total
}

size_t Sampler::weigh_top_k(std::span<const float> logits, float max_logit, float inv_temperature) {
  size_t n = static_cast<size_t>(params_.top_k);
  select_top(logits, n);
  scratch_.resize(logits.size());
  double total = 0.0;
  for (size_t j = 0; j < n; ++j) {
    const int32_t token = order_[j];
    scratch_[token] = relative_weight(logits[token], max_logit, inv_temperature);
    total += scratch_[token];
  }
  if (params_.top_p < 1.0f) {
    // The nucleus is over the distribution renormalised after top-k.
    const double needed = static_cast<double>(params_.top_p) * total;
    double cumulative = 0.0;
    size_t kept = 0;
    while (kept < n && (kept == 0 || cumulative < needed)) cumulative += scratch_[order_[kept++]];
    n = kept;
  }
  return apply_min_p(n);
}

size_t Sampler::weigh_top_p(std::span<const float> logits, float max_logit, float inv_temperature) {
  // The nucleus is a set: drawing needs no order inside it. Bucketing tokens
  // by log relative probability finds the bucket where the cumulative mass
  // crosses top_p; only that bucket is sorted, so a flat distribution with a
  // 100k-token nucleus costs two passes, not a vocab-wide sort.
  const size_t vocab = logits.size();
  const auto bucket_of = [&](float logit) -> size_t {
    if (logit == max_logit) return 0;  // also for +inf, where the difference is NaN
    const float distance = (max_logit - logit) * inv_temperature;  // -log(p / p_max)
    if (!(distance < kBucketRange)) return kNumBuckets - 1;        // includes -inf logits
    return static_cast<size_t>(distance * kBucketsPerUnit);
  };
  std::array<double, kNumBuckets> bucket_mass{};
  scratch_.resize(vocab);
  double total = 0.0;
  for (size_t i = 0; i < vocab; ++i) {
    scratch_[i] = relative_weight(logits[i], max_logit, inv_temperature);
    bucket_mass[bucket_of(logits[i])] += scratch_[i];
    total += scratch_[i];
  }
  const double needed = static_cast<double>(params_.top_p) * total;
  size_t edge = 0;  // the bucket the nucleus ends in
  for (double below = 0.0; edge + 1 < kNumBuckets && below + bucket_mass[edge] < needed;) {
    below += bucket_mass[edge++];
  }

  // Tokens before the edge bucket fill order_ from the front, those in it
  // from the back; then the edge ones move up behind the others and get sorted.
  // Branch-free: both free slots get written and only the right end advances
  // (front < back holds here, and front == back - 1 just writes one slot twice).
  order_.resize(vocab);
  size_t front = 0, back = vocab;
  for (size_t i = 0; i < vocab; ++i) {
    const size_t bucket = bucket_of(logits[i]);
    order_[front] = static_cast<int32_t>(i);
    order_[back - 1] = static_cast<int32_t>(i);
    front += bucket < edge;
    back -= bucket == edge;
  }
  const auto edge_begin = order_.begin() + front;
  const auto edge_end = std::copy(order_.begin() + back, order_.end(), edge_begin);
  order_.resize(edge_end - order_.begin());
  std::sort(edge_begin, order_.end(), ByLogitDesc{logits.data()});

  size_t n = front;
  double cumulative = 0.0;
  for (size_t j = 0; j < n; ++j) cumulative += scratch_[order_[j]];
  while (n < order_.size() && (n == 0 || cumulative < needed)) cumulative += scratch_[order_[n++]];
  return apply_min_p(n);
}

size_t Sampler::apply_min_p(size_t n) {
  // min-p after top-k/top-p, as vLLM orders them; weights are relative to the
  // max token, which survives both filters, so renormalising changes nothing.
  const float min_weight = params_.min_p;
  if (!(min_weight > 0.0f)) return n;
  const int32_t fallback = order_[0];
  const auto end = std::remove_if(order_.begin(), order_.begin() + n,
                                  [&](int32_t token) { return scratch_[token] < min_weight; });
  n = static_cast<size_t>(end - order_.begin());
  if (n == 0) {  // only with an unvalidated min_p > 1
    order_[0] = fallback;
    n = 1;
  }
  return n;
}

int32_t Sampler::draw_among(size_t n) {
  SS_CHECK_GE(n, size_t{1});
  double total = 0.0;
  for (size_t j = 0; j < n; ++j) total += scratch_[order_[j]];
  const double target = uniform() * total;
  double cumulative = 0.0;
  for (size_t j = 0; j < n; ++j) {
    cumulative += scratch_[order_[j]];
    if (cumulative > target) return order_[j];
  }
  // target rounded up to the total: the last token with any probability.
  while (n > 1 && scratch_[order_[n - 1]] == 0.0f) --n;
  return order_[n - 1];
}

void Sampler::select_top(std::span<const float> logits, size_t k) {
  const size_t vocab = logits.size();
  const ByLogitDesc better{logits.data()};
  order_.clear();
  if (k >= vocab) {
    order_.resize(vocab);
    std::iota(order_.begin(), order_.end(), 0);
    std::sort(order_.begin(), order_.end(), better);
    return;
  }
  SS_CHECK_GT(k, size_t{0});
  // Buffered selection: collect candidates, and whenever the buffer is full
  // cut it to the best k. After the first cut a token must beat the k-th best
  // so far, which almost every token fails with a single compare: O(vocab)
  // with a small constant instead of a vocab-wide nth_element or sort.
  const size_t capacity = std::max(2 * k, size_t{256});
  order_.reserve(capacity);
  auto cut_to_k = [&] {
    std::nth_element(order_.begin(), order_.begin() + (k - 1), order_.end(), better);
    order_.resize(k);
    // order_[k - 1] is the k-th best: everything before it is at least as good.
    return logits[order_[k - 1]];
  };
  bool have_floor = false;
  float floor = -kInf;
  for (size_t i = 0; i < vocab; ++i) {
    // A tie with the floor loses: every buffered token has a lower id.
    if (have_floor && !(logits[i] > floor)) continue;
    order_.push_back(static_cast<int32_t>(i));
    if (order_.size() == capacity) {
      floor = cut_to_k();
      have_floor = true;
    }
  }
  if (order_.size() > k) cut_to_k();
  std::sort(order_.begin(), order_.end(), better);
}

StopStringMatcher::StopStringMatcher(std::vector<std::string> stop_strings) {
  // An empty stop would match before any text; validate() rejects it, and
  // here it is simply ignored.
  for (std::string& stop : stop_strings) {
    if (!stop.empty()) stops_.push_back(std::move(stop));
  }
}

std::string StopStringMatcher::push(const std::string& text) {
  if (stopped_) return {};
  pending_ += text;

  // pending_ holds only text that was never emitted, so a match cannot start
  // inside text already sent to the client.
  size_t first_match = std::string::npos;
  for (const std::string& stop : stops_) first_match = std::min(first_match, pending_.find(stop));
  if (first_match != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, first_match);
    pending_.clear();
    return out;
  }

  // Hold back the longest suffix that a later push could complete into a
  // stop string; everything before it can never be part of one.
  size_t held = 0;
  for (const std::string& stop : stops_) {
    const size_t longest = std::min(pending_.size(), stop.size() - 1);
    for (size_t len = longest; len > held; --len) {
      if (pending_.compare(pending_.size() - len, len, stop, 0, len) == 0) {
        held = len;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - held);
  pending_.erase(0, pending_.size() - held);
  return out;
}

std::string StopStringMatcher::flush() {
  if (stopped_) return {};
  std::string out = std::move(pending_);
  pending_.clear();
  return out;
}

}  // namespace specstack
