// core/aligned_allocator.h
//
// CacheAlignedAllocator allocates on 64-byte boundaries. The expansion's arrays use it so
// that every kernel sweep sees the same alignment: Eigen peels unaligned leading
// elements into scalar code, and scalar and vector exp() may differ in the last bit, so
// alignment that varied with the heap would make predictions vary between otherwise
// identical models (a restored model must continue bit-identically).
#ifndef OKL_CORE_ALIGNED_ALLOCATOR_H_
#define OKL_CORE_ALIGNED_ALLOCATOR_H_

#include <cstddef>
#include <new>

namespace okl {

inline constexpr size_t kCacheLineBytes = 64;

template <typename T>
struct CacheAlignedAllocator {
  using value_type = T;

  CacheAlignedAllocator() = default;
  template <typename U>
  CacheAlignedAllocator(const CacheAlignedAllocator<U>&) {}  // NOLINT: rebinding

  T* allocate(size_t n) {
    return static_cast<T*>(
        ::operator new(n * sizeof(T), std::align_val_t{kCacheLineBytes}));
  }
  void deallocate(T* p, size_t) { ::operator delete(p, std::align_val_t{kCacheLineBytes}); }

  template <typename U>
  bool operator==(const CacheAlignedAllocator<U>&) const { return true; }
};

}  // namespace okl

#endif  // OKL_CORE_ALIGNED_ALLOCATOR_H_
