module {
  aie.device(npu2) {
    %shim_0_0 = aie.tile(0, 0)
    %tile_0_2 = aie.tile(0, 2)
    aie.objectfifo @g0_in(%shim_0_0, {%tile_0_2}, 2 : i32) : !aie.objectfifo<memref<128xi32>>
    aie.objectfifo @g0_host(%tile_0_2, {%shim_0_0}, 2 : i32) : !aie.objectfifo<memref<64xi32>>
    func.func private @g0(memref<128xi32>, memref<64xi32>) attributes {link_with = "g0.o"}
    %core_0_2 = aie.core(%tile_0_2) {
      %c0 = arith.constant 0 : index
      %c1 = arith.constant 1 : index
      %cmax = arith.constant 9223372036854775807 : index
      scf.for %launch = %c0 to %cmax step %c1 {
        %g0_in_view0 = aie.objectfifo.acquire @g0_in(Consume, 1) : !aie.objectfifosubview<memref<128xi32>>
        %g0_in_obj0 = aie.objectfifo.subview.access %g0_in_view0[0] : !aie.objectfifosubview<memref<128xi32>> -> memref<128xi32>
        %g0_host_view0 = aie.objectfifo.acquire @g0_host(Produce, 1) : !aie.objectfifosubview<memref<64xi32>>
        %g0_host_obj0 = aie.objectfifo.subview.access %g0_host_view0[0] : !aie.objectfifosubview<memref<64xi32>> -> memref<64xi32>
        func.call @g0(%g0_in_obj0, %g0_host_obj0) : (memref<128xi32>, memref<64xi32>) -> ()
        aie.objectfifo.release @g0_in(Consume, 1)
        aie.objectfifo.release @g0_host(Produce, 1)
      }
      aie.end
    } {stack_size = 1024 : i32}
    aie.runtime_sequence @sequence(%arg0: memref<1xi32>, %arg1: memref<512xi32>, %arg2: memref<64xi32>, %arg3: memref<1xi32>, %arg4: memref<3xi32>) {
      aiex.npu.dma_memcpy_nd(%arg2[0, 0, 0, 0][1, 1, 1, 64][0, 0, 0, 1]) {id = 0 : i64, metadata = @g0_in} : memref<64xi32>
      // iron.patch dma=1 word=1
      aiex.npu.dma_memcpy_nd(%arg1[0, 0, 0, 0][1, 1, 1, 64][0, 0, 0, 1]) {id = 1 : i64, metadata = @g0_in} : memref<512xi32>
      // iron.patch dma=2 word=2
      aiex.npu.dma_memcpy_nd(%arg1[0, 0, 0, 0][1, 1, 1, 64][0, 0, 0, 1]) {id = 2 : i64, metadata = @g0_host} : memref<512xi32>
      aiex.npu.dma_wait {symbol = @g0_host}
    }
  }
}
