module {
  aie.device(npu2) {
    %shim_0_0 = aie.tile(0, 0)
    %tile_0_2 = aie.tile(0, 2)
    aie.objectfifo @g0_in(%shim_0_0, {%tile_0_2}, 2 : i32) : !aie.objectfifo<memref<2048xi32>>
    aie.objectfifo @g0_host(%tile_0_2, {%shim_0_0}, 2 : i32) : !aie.objectfifo<memref<1024xi32>>
    func.func private @g0(memref<2048xi32>, memref<1024xi32>) attributes {link_with = "g0.o"}
    %core_0_2 = aie.core(%tile_0_2) {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %cmax = arith.constant 9223372036854775807 : index
      scf.for %launch = %c0 to %cmax step %c1 {
        %g0_in_view0 = aie.objectfifo.acquire @g0_in(Consume, 1) : !aie.objectfifosubview<memref<2048xi32>>
        %g0_in_obj0 = aie.objectfifo.subview.access %g0_in_view0[0] : !aie.objectfifosubview<memref<2048xi32>> -> memref<2048xi32>
        %g0_host_view0 = aie.objectfifo.acquire @g0_host(Produce, 1) : !aie.objectfifosubview<memref<1024xi32>>
        %g0_host_obj0 = aie.objectfifo.subview.access %g0_host_view0[0] : !aie.objectfifosubview<memref<1024xi32>> -> memref<1024xi32>
        func.call @g0(%g0_in_obj0, %g0_host_obj0) : (memref<2048xi32>, memref<1024xi32>) -> ()
        aie.objectfifo.release @g0_in(Consume, 1)
        aie.objectfifo.release @g0_host(Produce, 1)
      }
      aie.end
    } {stack_size = 1024 : i32}
    aie.runtime_sequence @sequence(%arg0: memref<1024xi32>, %arg1: memref<1xi32>, %arg2: memref<1024xi32>, %arg3: memref<1024xi32>, %arg4: memref<1xi32>) {
      aiex.npu.dma_memcpy_nd(%arg2[0, 0, 0, 0][1, 1, 2, 512][0, 0, 512, 1]) {id = 0 : i64, metadata = @g0_in} : memref<1024xi32>
      aiex.npu.dma_memcpy_nd(%arg0[0, 0, 0, 0][1, 1, 2, 512][0, 0, 512, 1]) {id = 1 : i64, metadata = @g0_in} : memref<1024xi32>
      aiex.npu.dma_memcpy_nd(%arg3[0, 0, 0, 0][1, 1, 2, 512][0, 0, 512, 1]) {id = 2 : i64, metadata = @g0_host} : memref<1024xi32>
      aiex.npu.dma_wait {symbol = @g0_host}
    }
  }
}
