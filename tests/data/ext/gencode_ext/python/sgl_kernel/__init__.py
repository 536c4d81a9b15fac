"""A stand-in for sgl_kernel's loader: sm90/ for exactly SM 9.0, sm100/ for the rest."""
